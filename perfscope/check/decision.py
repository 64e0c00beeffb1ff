"""The decision rule of the CI gate: pass, regression or inconclusive, from runs on both sides.

    >>> MetricCheck(metric=SAMPLES_PER_S, max_drop=0.10).evaluate(current_side, baseline_side).status
    'pass'

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from perfscope.check.metrics import SAMPLES_PER_S, Metric, MetricUnavailable, Side
from perfscope.check.sessions import MIN_SPREAD_DF, SessionSpread, StoredSession, session_spread
from perfscope.results import Gain
from perfscope.results.messages import Message, msg
from perfscope.stats import detectable_change, exp_or_inf, mann_whitney_p, power_at, t_quantile

Status = Literal["pass", "regression", "inconclusive"]
CONFIDENCE = 0.95
POWER = 0.80
MIN_RUNS = 3


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The outcome for one metric, with the evidence a reader needs to trust it."""

    metric: Metric
    status: Status
    message: Message  # worded by perfscope.check.render
    max_drop: float
    baseline: float | None = None  # geometric mean of the baseline runs' values
    current: float | None = None
    change: float | None = None  # q - 1: relative change, in the metric's units
    low: float | None = None  # interval of the change
    high: float | None = None
    confidence: float | None = None
    n_baseline: int = 0  # runs
    n_current: int = 0
    run_noise: float | None = None  # pooled standard deviation of log values between runs
    mde: float | None = None  # smallest relative change these runs detect with 80% power
    power: float | None = None  # `ab`: the chance, at this noise, that identical code passes (and a drop of max_drop is significant)
    step_p_value: float | None = None  # secondary: Mann-Whitney on per-step values
    sessions: int | None = None  # stored baseline sessions the interval rests on (None: one population)
    between_sd: float | None = None  # sd of session offsets used (log units): estimated, stated or assumed
    host_sd: float | None = None  # sd of host offsets used (None: the current host is in the history)
    new_host: bool = False
    warnings: tuple[Message, ...] = ()


def _contention(side: Side, label: str) -> list[Message]:
    return [msg("run_under_load", role=label, name=run.name, load=list(run.metrics.contention))
            for run in side.runs if run.metrics is not None and run.metrics.contention]


@dataclass(frozen=True, kw_only=True)
class MetricCheck:
    """One metric gated at one tolerance (like pytest-benchmark's compare-fail checks)."""

    metric: Metric
    max_drop: float
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.max_drop < 1:
            raise ValueError(f"max_drop must be in [0, 1), got {self.max_drop}")

    def evaluate(self, current: Side, baseline: Side, *, sessions: list[StoredSession] | None = None,
                 current_host: str = "", between_session: float | None = None,
                 between_host: float | None = None) -> Verdict:
        """Apply the module's decision rule. Raises MetricUnavailable when a side lacks the metric.

        ``sessions``: the stored baseline's runs by session, log values of this metric (``baseline`` holds them
        all), with their hosts; the current runs ran on ``current_host``. None: both sides are one session on
        one host (the same job), the run-to-run variance alone."""
        base, cur = self.metric.per_run(baseline), self.metric.per_run(current)
        title = self.metric.title
        warnings = tuple(_contention(baseline, "baseline") + _contention(current, "current"))
        common: dict[str, Any] = dict(metric=self.metric, max_drop=self.max_drop, n_baseline=len(base), n_current=len(cur),
                      warnings=warnings, step_p_value=self._step_test(current, baseline))
        bad = [v for v in base + cur if not (math.isfinite(v) and v > 0)]
        if bad:
            raise MetricUnavailable(msg("metric_values_invalid", title=title, values=bad[:3]))
        if not base or not cur:
            return Verdict(status="inconclusive", message=msg("verdict_no_runs", title=title), **common)
        lb, lc = [math.log(v) for v in base], [math.log(v) for v in cur]
        common |= dict(baseline=math.exp(statistics.fmean(lb)), current=math.exp(statistics.fmean(lc)))
        if len(base) + len(cur) < MIN_RUNS:
            return Verdict(status="inconclusive", **common, message=msg("verdict_too_few_runs", title=title,
                                                                         baseline=len(base), current=len(cur)))
        one_job = sessions is None
        stored = sessions if sessions is not None else [StoredSession(values=lb)]
        spread = session_spread(stored, lc, current_host=current_host,
                                between_session=0.0 if one_job else between_session, between_host=between_host)
        common |= dict(baseline=math.exp(spread.baseline_level), run_noise=spread.within_sd)
        if not one_job:
            common |= dict(sessions=spread.sessions, between_sd=spread.between_sd, host_sd=spread.host_sd,
                           new_host=spread.new_host)
        if spread.variance is None:
            return Verdict(status="inconclusive", change=math.exp(spread.current_level - spread.baseline_level) - 1,
                           **common, message=msg("verdict_no_interval", title=title, why=spread.refusal))
        if one_job:
            decides = _runs_needed((spread.within_sd or 0.0) ** 2, self.max_drop)
        else:
            decides = _what_decides(spread)
        return self._decide(spread.current_level - spread.baseline_level, math.sqrt(spread.variance), spread.df,
                            common, decides=decides, basis=None if one_job else spread.how)

    def _decide(self, diff: float, se: float, df: float, common: dict[str, Any], *, decides: Message,
                basis: list[Message] | None = None) -> Verdict:
        """Regression, pass or inconclusive from the log difference, its standard error and degrees of freedom."""
        half = t_quantile(1 - (1 - self.confidence) / 2, df) * se
        q, lo, hi = exp_or_inf(diff), exp_or_inf(diff - half), exp_or_inf(diff + half)
        mde = detectable_change(se, df, self.confidence, POWER)
        common |= dict(mde=mde)
        runs = msg("runs_compared", current=common["n_current"], baseline=common["n_baseline"], basis=basis or None)
        return judge(self.metric, self.max_drop, q, lo, hi, common, runs=runs, across_sessions=bool(basis),
                     resolves=mde, decides=decides, confidence=self.confidence)

    def _step_test(self, current: Side, baseline: Side) -> float | None:
        try:
            a, b = self.metric.steps(current), self.metric.steps(baseline)
        except MetricUnavailable:
            return None
        if len(a) < 2 or len(b) < 2:
            return None
        return mann_whitney_p(a[:20_000], b[:20_000])


def judge(metric: Metric, max_drop: float, q: float, lo: float, hi: float, common: dict[str, Any], *,
          runs: Message, confidence: float, across_sessions: bool = False, resolves: float | None = None,
          decides: Message | None = None) -> Verdict:
    """The one decision rule of `check` and `ab`: regression when the ratio ``q`` (current / baseline) is past the
    tolerance and its interval [lo, hi] excludes no change; pass when the interval excludes a drop past it;
    otherwise inconclusive, saying why (``decides``: what would decide it; ``resolves``: the detectable change)."""
    limit = 1 - max_drop if metric.higher_is_better else 1 + max_drop
    sign = 1 if metric.higher_is_better else -1
    beyond = sign * (q - limit) < 0
    significant = (hi < 1) if sign > 0 else (lo > 1)
    excluded = (lo > limit) if sign > 0 else (hi < limit)  # no drop beyond the tolerance inside the interval
    common = common | dict(change=q - 1, low=lo - 1, high=hi - 1, confidence=confidence)
    status: Status = "regression" if beyond and significant else "pass" if excluded else "inconclusive"
    outcome = status if status != "inconclusive" else "within_noise" if beyond else "drop_not_excluded"
    decided = status != "inconclusive"  # what would decide it: only while undecided
    message = msg("verdict", outcome=outcome, title=metric.title, change=q - 1, low=lo - 1, high=hi - 1,
                  confidence=confidence, runs=runs, max_drop=max_drop, resolves=None if decided else resolves,
                  decides=None if decided else decides, across_sessions=across_sessions)
    return Verdict(status=status, message=message, **common)


Z_CONFIDENCE, Z_POWER = 1.959964, 0.841621


def _runs_for_power(sd: float, max_drop: float, runs: float) -> int:
    """Runs that detect a log change of ``max_drop`` with 80% power, for ``sd`` at ``runs`` runs (normal approx.)."""
    return max(2, math.ceil(runs * (sd * (Z_CONFIDENCE + Z_POWER) / -math.log1p(-max_drop)) ** 2))


def _runs_needed(pooled_var: float, max_drop: float) -> Message:
    """Runs per side that would exclude a drop of ``max_drop`` on identical code with 80% power."""
    if pooled_var <= 0:
        return msg("more_runs_decide")
    return msg("runs_per_side_decide", runs=_runs_for_power(math.sqrt(pooled_var), max_drop, 2))


def _what_decides(spread: SessionSpread) -> Message:
    """What would narrow an interval across sessions: the term that dominates it is the spread between days or hosts."""
    if spread.new_host and spread.host_sd is not None:
        return msg("decide_new_host", hosts=MIN_SPREAD_DF + 1)
    if spread.assumed:
        return msg("decide_assumed_spread", sessions=spread.sessions, needed=MIN_SPREAD_DF + 1)
    return msg("decide_more_sessions")


# ------------------------------------------------------------------------------ `ab`: the paired A/B decision
# A candidate's runs interleaved with the baseline revision's, in one job on one machine (docs/ci-gate.md).

class PairedTest(Protocol):
    """perfscope.search.compare.PairedTest's shape (the gate reads results, it never imports how they are measured)."""

    se: float
    df: float
    runs: int

    @property
    def decidable(self) -> bool: ...

    def gain(self, confidence: float) -> Gain: ...

def rounds_for_power(test: PairedTest, max_drop: float) -> int | None:
    """--rounds that give 80% power at ``max_drop`` at this noise (se ∝ 1/sqrt(rounds))."""
    if not (math.isfinite(test.se) and test.se > 0 and test.runs > 0):
        return None
    return _runs_for_power(test.se, max_drop, test.runs)


def power_text(test: PairedTest, max_drop: float) -> tuple[float | None, Message]:
    """(power at the tolerance, the sentence a verdict carries)."""
    power = power_at(test.se, test.df, math.log1p(-max_drop), CONFIDENCE) if test.decidable else None
    needed = rounds_for_power(test, max_drop)
    if power is None:
        return None, msg("power_unknown")
    return power, msg("power_at_tolerance", max_drop=max_drop, power=power,
                      needed=needed if power < POWER else None, target=POWER)


def decide_paired(test: PairedTest | None, *, max_drop: float, baseline: float | None = None,
                  current: float | None = None, n_baseline: int = 0) -> Verdict:
    """Pass, regression or inconclusive for samples/s from the paired comparison (candidate / baseline)."""
    title = SAMPLES_PER_S.title
    common = dict(metric=SAMPLES_PER_S, max_drop=max_drop, baseline=baseline, current=current, n_baseline=n_baseline)
    if test is None:
        return Verdict(status="inconclusive", **common, message=msg("ab_no_evidence", title=title))
    gain = test.gain(CONFIDENCE)
    power, powered = power_text(test, max_drop)
    common |= dict(n_current=gain.runs, n_baseline=gain.reference_runs, change=gain.ratio - 1, power=power)
    if not test.decidable or not (0 < gain.low <= gain.high < math.inf):
        return Verdict(status="inconclusive", **common, message=msg(
            "ab_no_interval", title=title, change=gain.ratio - 1, runs=gain.runs, power=powered))
    common |= dict(mde=gain.mde)
    runs = msg("runs_interleaved", candidate=gain.runs, baseline=gain.reference_runs, power=powered)
    return judge(SAMPLES_PER_S, max_drop, gain.ratio, gain.low, gain.high, common, runs=runs,
                 confidence=gain.confidence)


__all__ = ["MetricCheck", "MetricUnavailable", "Status", "Verdict", "decide_paired", "judge", "power_text", "rounds_for_power"]

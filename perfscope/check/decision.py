"""The decision rule of the CI gate: pass, regression or inconclusive, from runs on both sides.

    >>> MetricCheck(metric=SAMPLES_PER_S, max_drop=0.10).evaluate(current_side, baseline_side).status
    'pass'

The rule. Each side is a set of runs (fresh processes) of the gated configuration; a run's value is work /
wall time of its windows. On log values, q = geometric-mean ratio current / baseline in the metric's own
units; its interval [lo, hi] is a t-interval whose variance pools both sides' run-to-run variances
(df = runs − 2). d = --max-drop; the limit L = 1 − d where higher is better (MFU, samples/s), 1 + d for
step time. In "higher is better" terms:

1. Fewer than 3 runs in all, or one side without runs -> INCONCLUSIVE: nothing says how noisy this
   machine is between runs (save a baseline of several runs; `perfscope analyze --repeat N`).
2. REGRESSION when q is past L *and* the drop is significant: the whole interval is below 1 (asv's rule:
   significant and beyond the factor). The false-alarm rate on identical code is at most 2.5%.
3. INCONCLUSIVE when q is past L but the interval reaches 1: possibly a regression, possibly noise.
4. PASS otherwise (q within the tolerance). The verdict states the smallest drop these runs could have
   detected (minimum detectable effect, 80% power); when that is larger than d, a warning says a drop of
   d could have passed unseen, and how many runs would resolve it.

Across sessions (a stored baseline: `evaluate(..., sessions=...)`): the baseline is the mean of its stored
sessions' means, and the variance and degrees of freedom are the spread between sessions'
(perfscope.check.sessions); with one stored session and no stated allowance, a change past L is INCONCLUSIVE
(nothing tells a code change from a machine/day offset). Rules 2-4 then apply as written.

Secondary, never deciding: a Mann-Whitney test on the per-step values of all runs, reported for reading.
Runs measured while other processes loaded the machine are named in the verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Literal

from perfscope.check.metrics import Metric, MetricUnavailable, Side
from perfscope.check.sessions import session_spread
from perfscope.stats import confidence_text, detectable_change, exp_or_inf, t_quantile

Status = Literal["pass", "regression", "inconclusive"]
CONFIDENCE = 0.95
POWER = 0.80
MIN_RUNS = 3


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The outcome for one metric, with the evidence a reader needs to trust it."""

    metric: Metric
    status: Status
    message: str
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
    step_p_value: float | None = None  # secondary: Mann-Whitney on per-step values
    sessions: int | None = None  # stored baseline sessions the interval rests on (None: one population)
    between_sd: float | None = None  # estimated sd of session offsets (log units)
    warnings: tuple[str, ...] = ()


def _contention(side: Side, label: str) -> list[str]:
    out = []
    for run in side.runs:
        if run.metrics is not None and run.metrics.contention:
            out.append(f"{label} run {run.name} was measured under load ({'; '.join(run.metrics.contention)})")
    return out


@dataclass(frozen=True, kw_only=True)
class MetricCheck:
    """One metric gated at one tolerance (like pytest-benchmark's compare-fail checks)."""

    metric: Metric
    max_drop: float
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.max_drop < 1:
            raise ValueError(f"max_drop must be in [0, 1), got {self.max_drop}")

    @property
    def limit(self) -> float:
        """The ratio current/baseline beyond which the metric counts as dropped by more than max_drop."""
        return 1 - self.max_drop if self.metric.higher_is_better else 1 + self.max_drop

    def evaluate(self, current: Side, baseline: Side, *, sessions: list[Side] | None = None,
                 allowance: float | None = None) -> Verdict:
        """Apply the module's decision rule. Raises MetricUnavailable when a side lacks the metric.

        ``sessions``: the stored baseline's runs, one Side per session (``baseline`` holds them all): the
        comparison then crosses sessions and their spread joins the variance (perfscope.check.sessions);
        ``allowance`` is the user's stated between-session sd instead. None: both sides are one session
        (same job, same machine), the run-to-run variance alone."""
        base, cur = self.metric.per_run(baseline), self.metric.per_run(current)
        title = self.metric.title
        warnings = tuple(_contention(baseline, "baseline") + _contention(current, "current"))
        common: dict[str, Any] = dict(metric=self.metric, max_drop=self.max_drop, n_baseline=len(base), n_current=len(cur),
                      warnings=warnings, step_p_value=self._step_test(current, baseline))
        bad = [v for v in base + cur if not (math.isfinite(v) and v > 0)]
        if bad:
            raise MetricUnavailable(f"{title}: non-positive or non-finite run values {bad[:3]}")
        if not base or not cur:
            return Verdict(status="inconclusive", message=f"{title}: no runs to compare", **common)
        lb, lc = [math.log(v) for v in base], [math.log(v) for v in cur]
        common |= dict(baseline=math.exp(statistics.fmean(lb)), current=math.exp(statistics.fmean(lc)))
        if len(base) + len(cur) < MIN_RUNS:
            return Verdict(status="inconclusive", **common, message=(
                f"{title}: {len(base)} baseline run(s) and {len(cur)} current run(s) cannot separate a regression "
                "from this machine's run-to-run noise; save a baseline of several runs (`perfscope analyze --repeat 5`, "
                "then `perfscope baseline save`) and check current runs from `--repeat 3`"))
        if sessions is not None:
            return self._across_sessions(lc, [[math.log(v) for v in self.metric.per_run(s)] for s in sessions],
                                         allowance, common)
        df = len(base) + len(cur) - 2
        pooled = ((len(base) - 1) * _var(lb) + (len(cur) - 1) * _var(lc)) / df
        se = math.sqrt(pooled * (1 / len(base) + 1 / len(cur)))
        diff = statistics.fmean(lc) - statistics.fmean(lb)
        common |= dict(run_noise=math.sqrt(pooled))
        return self._decide(diff, se, df, common, runs_needed=_runs_needed(pooled, self.max_drop))

    def _across_sessions(self, lc: list[float], sessions: list[list[float]], allowance: float | None,
                         common: dict[str, Any]) -> Verdict:
        """The rule with the stored sessions' spread added to the variance (perfscope.check.sessions)."""
        spread = session_spread(sessions, lc, allowance=allowance)
        common |= dict(baseline=math.exp(spread.baseline_level), sessions=spread.sessions, between_sd=spread.between_sd,
                       run_noise=spread.within_sd)
        if spread.variance is None:
            q = math.exp(spread.current_level - spread.baseline_level)
            sign = 1 if self.metric.higher_is_better else -1
            title, tolerance = self.metric.title, f"{self.max_drop:.1%} tolerance"
            if sign * (q - self.limit) < 0:
                return Verdict(status="inconclusive", change=q - 1, **common,
                               message=f"{title} {q - 1:+.1%}: past the {tolerance}, but {spread.refusal}")
            common["warnings"] = (*common["warnings"], f"{title}: {spread.refusal}; a drop hidden by a faster machine "
                                  "would pass unseen")
            return Verdict(status="pass", change=q - 1, **common,
                           message=f"{title} {q - 1:+.1%}: within the {tolerance} (no interval: {spread.refusal})")
        diff = spread.current_level - spread.baseline_level
        return self._decide(diff, math.sqrt(spread.variance), spread.df, common, basis=spread.how,
                            runs_needed="more stored sessions (`perfscope baseline update`) or `perfscope ab` would resolve it")

    def _decide(self, diff: float, se: float, df: float, common: dict[str, Any], *, runs_needed: str,
                basis: str = "") -> Verdict:
        """Regression, inconclusive or pass from the log difference, its standard error and degrees of freedom."""
        title = self.metric.title
        warnings = common["warnings"]
        n_base, n_cur = common["n_baseline"], common["n_current"]
        half = t_quantile(1 - (1 - self.confidence) / 2, df) * se
        q, lo, hi = exp_or_inf(diff), exp_or_inf(diff - half), exp_or_inf(diff + half)
        mde = detectable_change(se, df, self.confidence, POWER)
        common |= dict(change=q - 1, low=lo - 1, high=hi - 1, confidence=self.confidence, mde=mde)
        sign = 1 if self.metric.higher_is_better else -1
        beyond = sign * (q - self.limit) < 0
        significant = (hi < 1) if sign > 0 else (lo > 1)
        where = f"; {basis}" if basis else ""
        change = (f"{q - 1:+.1%} ({confidence_text(self.confidence)} interval {lo - 1:+.1%} .. {hi - 1:+.1%}; "
                  f"{n_cur} vs {n_base} runs{where})")
        tolerance = f"{self.max_drop:.1%} tolerance"
        noise = "the noise between sessions" if basis else "this machine's run-to-run noise"
        if beyond and significant:
            return Verdict(status="regression", message=f"{title} {change}: worse than the {tolerance}", **common)
        if beyond:
            return Verdict(status="inconclusive", **common, message=(
                f"{title} {change}: past the {tolerance}, but within {noise} "
                f"(it resolves changes of about {mde:.0%}); {'add runs on both sides' if not basis else runs_needed}"))
        extra = ()
        if mde > self.max_drop:
            extra = (f"{title}: these runs resolve changes of about {mde:.0%}, more than the {tolerance}: "
                     f"a drop of {self.max_drop:.0%} could pass unseen; {runs_needed}",)
        common["warnings"] = warnings + extra
        return Verdict(status="pass", message=f"{title} {change}: within the {tolerance}", **common)

    def _step_test(self, current: Side, baseline: Side) -> float | None:
        from perfscope.stats import mann_whitney_p

        try:
            a, b = self.metric.steps(current), self.metric.steps(baseline)
        except MetricUnavailable:
            return None
        if len(a) < 2 or len(b) < 2:
            return None
        return mann_whitney_p(a[:20_000], b[:20_000])


def _var(values: list[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0


def _runs_needed(pooled_var: float, max_drop: float) -> str:
    """Runs per side that would resolve ``max_drop`` at this noise (normal approximation)."""
    if pooled_var <= 0:
        return "more runs on both sides would resolve it"
    z = 1.96 + 0.84
    n = math.ceil(2 * (z * math.sqrt(pooled_var) / math.log(1 / (1 - max_drop))) ** 2)
    return f"about {n} runs per side would resolve it at this noise"


__all__ = ["MetricCheck", "MetricUnavailable", "Status", "Verdict"]

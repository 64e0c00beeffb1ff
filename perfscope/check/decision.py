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

Secondary, never deciding: a Mann-Whitney test on the per-step values of all runs, reported for reading.
Runs measured while other processes loaded the machine are named in the verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from perfscope.check.metrics import Metric, MetricUnavailable, Side

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
    warnings: tuple[str, ...] = ()


def _t(q: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


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

    def evaluate(self, current: Side, baseline: Side) -> Verdict:
        """Apply the module's decision rule. Raises MetricUnavailable when a side lacks the metric."""
        base, cur = self.metric.per_run(baseline), self.metric.per_run(current)
        title = self.metric.title
        warnings = tuple(_contention(baseline, "baseline") + _contention(current, "current"))
        common = dict(metric=self.metric, max_drop=self.max_drop, n_baseline=len(base), n_current=len(cur),
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
        df = len(base) + len(cur) - 2
        pooled = ((len(base) - 1) * _var(lb) + (len(cur) - 1) * _var(lc)) / df
        se = math.sqrt(pooled * (1 / len(base) + 1 / len(cur)))
        diff = statistics.fmean(lc) - statistics.fmean(lb)
        half = _t(1 - (1 - self.confidence) / 2, df) * se
        q, lo, hi = math.exp(diff), math.exp(diff - half), math.exp(diff + half)
        mde = math.exp((_t(1 - (1 - self.confidence) / 2, df) + _t(POWER, df)) * se) - 1
        common |= dict(change=q - 1, low=lo - 1, high=hi - 1, confidence=self.confidence, run_noise=math.sqrt(pooled), mde=mde)
        sign = 1 if self.metric.higher_is_better else -1
        beyond = sign * (q - self.limit) < 0
        significant = (hi < 1) if sign > 0 else (lo > 1)
        change = f"{q - 1:+.1%} ({self.confidence:.0%} interval {lo - 1:+.1%} .. {hi - 1:+.1%}; {len(cur)} vs {len(base)} runs)"
        tolerance = f"{self.max_drop:.1%} tolerance"
        if beyond and significant:
            return Verdict(status="regression", message=f"{title} {change}: worse than the {tolerance}", **common)
        if beyond:
            return Verdict(status="inconclusive", **common, message=(
                f"{title} {change}: past the {tolerance}, but within this machine's run-to-run noise "
                f"(it resolves changes of about {mde:.0%}); add runs on both sides"))
        extra = ()
        if mde > self.max_drop:
            extra = (f"{title}: these runs resolve changes of about {mde:.0%}, more than the {tolerance}: "
                     f"a drop of {self.max_drop:.0%} could pass unseen; {_runs_needed(pooled, self.max_drop)}",)
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

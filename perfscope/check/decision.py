"""The decision rule of the CI gate: pass, regression or inconclusive, from two sets of per-step samples.

    >>> MetricCheck(metric=MFU, max_drop=0.05).evaluate(current_side, baseline_side).status
    'pass'

The rule. q = median(current values) / median(baseline values), in the metric's own units; d = --max-drop;
the limit L = 1 - d where higher is better (MFU, samples/s) and 1 + d for step time. "Good side" means
q >= L (resp. q <= L).

1. Fewer than ``min_samples`` (5) measured steps on either side -> INCONCLUSIVE.
2. [lo, hi] = seeded percentile-bootstrap interval of q at ``confidence`` (95%), `stats.ratio_of_medians`.
   The run *resolves* the tolerance when the interval is no wider than it: (hi - lo) / 2 <= d / 2.
3. PASS when the whole interval is on the good side of L, or when the run resolves the tolerance and
   q is on the good side of L.
4. REGRESSION when the change is significant (5) and either the whole interval is past L, or the run
   resolves the tolerance and q is past L.
5. Significant: the Mann-Whitney U test says the samples differ, two-sided p < ``alpha`` (0.002, asv's
   threshold). When the sample sizes are too small for the test ever to reach alpha
   (`stats.mann_whitney_min_p`, e.g. 6 vs 6 steps) the interval alone decides, as asv falls back on
   confidence intervals.
6. Anything else -> INCONCLUSIVE: the interval straddles L and is wider than the tolerance (too noisy to
   tell whether the change exceeds d), or the change is past L but the rank test does not confirm it.

So noise-only runs and changes well inside d pass, a drop well past d fails, and a run too noisy to
tell says so (exit 3) instead of passing. With 2% step-time noise and 20-30 steps per side this passes
noise and a 3% drop at d = 5% and fails a 10% drop, every seed (tests/test_check.py pins it).

Why both tests: the interval answers "is the change bigger than the tolerance?", which a p-value cannot;
the strict rank test guards the failing side, where a bootstrap of medians over a few dozen samples is
known to be optimistic. Why never a silent pass: a gate that passes when it cannot tell is no gate.

Caveat the numbers cannot see: per-step samples measure noise *within* one run. Drift *between* runs
(another CI machine, thermal state, neighbours) is invisible to them, so --max-drop must exceed the
run-to-run variation of the machine the gate runs on (docs/ci-gate.md shows how to measure it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfscope.check.metrics import Metric, MetricUnavailable, Side
from perfscope.stats import (
    mann_whitney_min_p,
    mann_whitney_p,
    ratio_of_medians,
    summarize,
)

Status = Literal["pass", "regression", "inconclusive"]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The outcome for one metric, with the evidence a reader needs to trust it."""

    metric: Metric
    status: Status
    message: str
    max_drop: float
    baseline: float | None = None  # median of the per-step values
    current: float | None = None
    change: float | None = None  # q - 1: relative change of the median, in the metric's units
    low: float | None = None  # interval of the change
    high: float | None = None
    confidence: float | None = None
    p_value: float | None = None  # Mann-Whitney U, two-sided
    n_baseline: int = 0
    n_current: int = 0


@dataclass(frozen=True, kw_only=True)
class MetricCheck:
    """One metric gated at one tolerance (like pytest-benchmark's compare-fail checks)."""

    metric: Metric
    max_drop: float
    confidence: float = 0.95
    alpha: float = 0.002
    min_samples: int = 5
    resamples: int = 4000

    def __post_init__(self) -> None:
        if not 0 <= self.max_drop < 1:
            raise ValueError(f"max_drop must be in [0, 1), got {self.max_drop}")
        if self.min_samples < 2:
            raise ValueError("min_samples must be >= 2")

    @property
    def limit(self) -> float:
        """The ratio current/baseline beyond which the metric counts as dropped by more than max_drop."""
        return 1 - self.max_drop if self.metric.higher_is_better else 1 + self.max_drop

    def fails(self, current: Side, baseline: Side) -> str | None:
        """The regression message, or None when the metric did not regress (passed or inconclusive)."""
        verdict = self.evaluate(current, baseline)
        return verdict.message if verdict.status == "regression" else None

    def evaluate(self, current: Side, baseline: Side) -> Verdict:
        """Apply the module's decision rule. Raises MetricUnavailable when a side lacks the metric."""
        base = self.metric.values(baseline)
        cur = self.metric.values(current)
        title = self.metric.title
        common = dict(metric=self.metric, max_drop=self.max_drop, n_baseline=len(base), n_current=len(cur))
        if not base or not cur:
            return Verdict(status="inconclusive", message=f"{title}: no measured steps to compare", **common)
        common |= dict(baseline=summarize(base).median, current=summarize(cur).median)
        if min(len(base), len(cur)) < self.min_samples:
            return Verdict(
                status="inconclusive",
                message=(
                    f"{title}: too few samples to decide ({len(base)} baseline / {len(cur)} current steps, "
                    f"need >= {self.min_samples} each); measure more steps"
                ),
                **common,
            )
        est = ratio_of_medians(cur, base, confidence=self.confidence, resamples=self.resamples)
        p = mann_whitney_p(cur, base)
        rank_test_powerless = mann_whitney_min_p(len(cur), len(base)) >= self.alpha
        significant = rank_test_powerless or p < self.alpha
        common |= dict(
            change=est.ratio - 1, low=est.low - 1, high=est.high - 1, confidence=self.confidence, p_value=p
        )
        limit = self.limit
        sign = 1 if self.metric.higher_is_better else -1  # map both directions onto "higher is better"
        good_end, bad_end, point = (est.low, est.high, est.ratio) if sign > 0 else (est.high, est.low, est.ratio)
        all_within = sign * (good_end - limit) >= 0 and sign * (bad_end - limit) >= 0
        all_beyond = sign * (good_end - limit) < 0 and sign * (bad_end - limit) < 0
        resolved = (est.high - est.low) / 2 <= self.max_drop / 2
        point_within = sign * (point - limit) >= 0

        tolerance = f"{self.max_drop:.1%} tolerance"
        change = f"{est.ratio - 1:+.1%} ({self.confidence:.0%} interval {est.low - 1:+.1%} .. {est.high - 1:+.1%})"
        test = "too few steps for the rank test, interval only" if rank_test_powerless else f"p = {p:.2g}"
        if all_within or (resolved and point_within):
            return Verdict(status="pass", message=f"{title} {change}: within the {tolerance}", **common)
        if (all_beyond or resolved) and significant:
            return Verdict(
                status="regression", message=f"{title} {change}: worse than the {tolerance} ({test})", **common
            )
        if all_beyond or resolved:
            reason = f"worse than the {tolerance}, but Mann-Whitney p = {p:.2g} is not below {self.alpha:g}"
        else:
            reason = f"the interval is too wide to tell whether the change exceeds the {tolerance}"
        return Verdict(
            status="inconclusive", message=f"{title} {change}: {reason}; measure more steps", **common
        )


__all__ = ["MetricCheck", "MetricUnavailable", "Status", "Verdict"]

"""Comparisons between configurations, with fresh-process runs as the unit of evidence.

    noise = run_noise(baseline_runs)                       # RunNoise(runs=9, sigma=0.05, mde=0.21)
    gain = compare(candidate_runs, baseline_runs)          # Gain(ratio=1.43, low=1.31, high=1.56, verdict="faster")

The design follows three tools that measure for a living:
- pyperf: a value is a whole process's measurement (calibrated to last long enough), never a step;
  steps of one process share its luck (clocks, neighbours, allocator layout, the first-process penalty).
- asv: configurations are measured in interleaved rounds, so slow drift of the machine hits both sides.
- Chromium's pinpoint: a comparison answers faster / slower / same / "need more runs", and runs are added
  to the undecided ones until they are decided or the budget is spent.

The statistics. Each run's throughput is samples / wall time of its window. The reference configuration
(the baseline) is re-measured through the whole sweep, in fresh processes interleaved with the candidates.
For a candidate run i, r_i = log(candidate rate_i) − log(local reference_i), where the local reference is
the mean log rate of the reference runs measured just before and just after it: slow drift cancels, and no
single outlying baseline run is the reference for every gain. The estimate is mean(r_i); its variance
pools two sources, weighted by their degrees of freedom: the reference's own run-to-run variance, from
successive differences of its series (von Neumann's estimator, robust to slow drift), scaled to a pair
(candidate noise assumed alike, plus the averaged reference's), and the spread of the r_i themselves once
there are two or more — or the r_i's own variance alone when it is the larger (one lucky process among the
candidate's runs must not hide behind a long, quiet reference series). The interval is a t-interval on that
variance, exponentiated: a ratio of throughputs (> 1 is faster), at 99% because undecided comparisons are
looked at again after more runs.
The minimum detectable effect is the smallest true change these runs would find with 80% power.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from perfscope.results.model import Gain, RunNoise, Trial

CONFIDENCE = 0.99
POWER = 0.80
SAME_MARGIN = 0.02
"""A change inside ±2% counts as "the same" once the interval fits inside that margin."""
METHOD = (
    "fresh-process runs, each paired with the reference runs measured just before and after it; "
    "t-interval on log throughput with the reference's run-to-run variance pooled in"
)


def log_rate(run: Trial) -> float:
    assert run.metrics is not None and run.metrics.samples_per_s
    return math.log(run.metrics.samples_per_s)


def _usable(runs: Sequence[Trial]) -> list[Trial]:
    return sorted((r for r in runs if r.evidence and r.metrics and r.metrics.samples_per_s),
                  key=lambda r: (r.sequence is None, r.sequence or 0))


def _t(q: float, df: float) -> float:
    from scipy.stats import (
        t,  # imported here: scipy costs ~0.8 s and only the analyze parent compares
    )

    return float(t.ppf(q, df))


def reference_variance(reference_runs: Sequence[Trial]) -> tuple[float | None, int]:
    """(variance of log throughput between runs, degrees of freedom) from successive differences."""
    values = [log_rate(r) for r in _usable(reference_runs)]
    if len(values) < 2:
        return None, 0
    diffs = [b - a for a, b in zip(values, values[1:])]
    return sum(d * d for d in diffs) / (2 * len(diffs)), len(diffs)


def run_noise(reference_runs: Sequence[Trial]) -> RunNoise:
    var, df = reference_variance(reference_runs)
    if var is None:
        return RunNoise(runs=len(_usable(reference_runs)), sigma=None)
    se = math.sqrt(var * 1.5)  # one candidate run against two neighbouring reference runs
    return RunNoise(runs=df + 1, sigma=math.sqrt(var), mde=_mde(se, df))


def _mde(se: float, df: float) -> float | None:
    if df < 1 or not math.isfinite(se):
        return None
    return math.exp((_t(1 - (1 - CONFIDENCE) / 2, df) + _t(POWER, df)) * se) - 1


def _local_reference(run: Trial, references: list[Trial]) -> tuple[float, int] | None:
    """Mean log rate of the nearest reference run before and after ``run`` (one side when only one exists)."""
    seq = run.sequence if run.sequence is not None else math.inf
    before = [r for r in references if (r.sequence if r.sequence is not None else -1) < seq]
    after = [r for r in references if (r.sequence if r.sequence is not None else -1) > seq]
    chosen = ([before[-1]] if before else []) + ([after[0]] if after else [])
    if not chosen:
        return None
    return statistics.fmean(log_rate(r) for r in chosen), len(chosen)


def compare(candidate_runs: Sequence[Trial], reference_runs: Sequence[Trial], *, reference: str = "baseline") -> Gain | None:
    """The candidate's throughput over the reference's, from runs; None without a usable run on each side."""
    candidates, references = _usable(candidate_runs), _usable(reference_runs)
    pairs = [(log_rate(c), local) for c in candidates if (local := _local_reference(c, references)) is not None]
    if not pairs:
        return None
    diffs = [c - ref for c, (ref, _) in pairs]
    k = len(diffs)
    mean = statistics.fmean(diffs)
    ref_var, ref_df = reference_variance(references)
    weight_sum, df = 0.0, 0
    if ref_var is not None:
        pair_var_prior = ref_var * (1 + statistics.fmean(1 / m for _, (_, m) in pairs))
        weight_sum += ref_df * pair_var_prior
        df += ref_df
    own = statistics.variance(diffs) if k >= 2 else 0.0
    if k >= 2:
        weight_sum += (k - 1) * own
        df += k - 1
    common = dict(runs=k, reference=reference, reference_runs=len(references), method=METHOD, confidence=CONFIDENCE)
    if df == 0:  # one run each side and no reference spread: nothing says how noisy this machine is
        ratio = math.exp(mean)
        return Gain(ratio=ratio, low=0.0, high=math.inf, verdict="undecided", mde=None, **common)
    # Pooling assumes the candidate's runs vary like the reference's. When its own spread is larger (one lucky
    # or unlucky process among its runs, or a configuration that varies more, e.g. autotuned kernels), the long
    # reference series would dilute it and one outlying run could carry the verdict: its own spread is used.
    se = math.sqrt(max(weight_sum / df, own) / k)
    half = _t(1 - (1 - CONFIDENCE) / 2, df) * se
    low, high = math.exp(mean - half), math.exp(mean + half)
    return Gain(ratio=math.exp(mean), low=low, high=high, verdict=verdict(low, high), mde=_mde(se, df), **common)


def verdict(low: float, high: float) -> str:
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    if low >= 1 - SAME_MARGIN and high <= 1 + SAME_MARGIN:
        return "same"
    return "undecided"


def compare_gains(better: Gain, worse: Gain) -> tuple[float, bool]:
    """(ratio of two gains against the same reference, whether ``better`` is faster than ``worse``).

    Their log-intervals are combined as independent (each from its own runs), at the same confidence.
    """
    if not all(math.isfinite(v) and v > 0 for v in (better.low, better.high, worse.low, worse.high)):
        return better.ratio / worse.ratio, False
    half_b = (math.log(better.high) - math.log(better.low)) / 2
    half_w = (math.log(worse.high) - math.log(worse.low)) / 2
    diff = math.log(better.ratio) - math.log(worse.ratio)
    return math.exp(diff), diff - math.hypot(half_b, half_w) > 0


def relative_gain(better: Gain, worse: Gain, *, reference: str) -> Gain:
    """``better`` over ``worse`` (two gains against the same reference) as a Gain whose reference is ``worse``'s
    configuration: what a knob measured on top of another adds to it. The interval is `compare_gains`' (the two
    log-intervals combined as independent), so its verdict is "faster" exactly when `compare_gains` decides."""
    ratio = better.ratio / worse.ratio
    common = dict(confidence=better.confidence, runs=better.runs, reference=reference, reference_runs=worse.runs,
                  method="ratio of two gains against the same baseline; their intervals combined as independent")
    if not all(math.isfinite(v) and v > 0 for v in (better.low, better.high, worse.low, worse.high)):
        return Gain(ratio=ratio, low=0.0, high=math.inf, verdict="undecided", **common)
    half = math.hypot(math.log(better.high / better.low) / 2, math.log(worse.high / worse.low) / 2)
    low, high = ratio * math.exp(-half), ratio * math.exp(half)
    return Gain(ratio=ratio, low=low, high=high, verdict=verdict(low, high), **common)  # type: ignore[arg-type]


FUTILITY_MIN_RUNS = 3
"""Below this many candidate runs the interval is dominated by a large t quantile (few degrees of freedom) or
borrows the reference's spread, so projecting it forward would call hopeless what two more runs decide."""


def could_still_win(gain: Gain | None, min_gain: float, max_runs: int | None = None) -> bool:
    """Undecided, the interval still reaches a worthwhile speed-up, and — with ``max_runs`` — more runs could
    plausibly decide it: worth another run.

    Futility stop (as in sequential trials): with k runs the interval's half-width shrinks about as
    sqrt(k / max_runs) by ``max_runs``; if the point estimate, held where it is, would still sit inside that
    projected interval, the remaining runs would most likely end "cannot tell" too, and they cost the same
    as the runs that found nothing. The sweep spends them on candidates that can still be decided.
    """
    if gain is None or gain.verdict != "undecided" or gain.high < 1 + min_gain:
        return False
    if max_runs is None or gain.runs < FUTILITY_MIN_RUNS or not (0 < gain.low <= gain.high < math.inf) or gain.runs >= max_runs:
        return max_runs is None or gain.runs < max_runs  # one run's interval borrows the reference's spread: look again
    projected_half = math.log(gain.high / gain.low) / 2 * math.sqrt(gain.runs / max_runs)
    return math.log(gain.ratio) >= projected_half


CLEAR_WIN = 1.5
"""A "faster" verdict whose interval starts at 1.5× or more needs no second run (see `unconfirmed`)."""


def unconfirmed(gain: Gain | None) -> bool:
    """A "faster" verdict that rests on a single candidate run and is not a clear win: worth one more run.

    With one run, the candidate's own run-to-run spread is unknown and the interval assumes it is the
    reference's; one lucky process (a clock boost, a quiet neighbour, an autotuner's lucky pick) 5% fast on a
    machine with 1% noise would be declared a win and never looked at again. A second run brings the
    candidate's own spread into the interval. A clear win (low end at `CLEAR_WIN` or more) needs no second run.
    """
    return gain is not None and gain.faster and gain.runs < 2 and gain.low < CLEAR_WIN

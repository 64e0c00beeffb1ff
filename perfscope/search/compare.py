"""Comparisons between configurations, with fresh-process runs as the unit of evidence. Design notes: docs/sweep.md."""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from perfscope.results.model import Gain, RunNoise, Trial
from perfscope.stats import detectable_change, exp_or_inf, t_quantile

CONFIDENCE = 0.99
"""The confidence of a single comparison (stacking steps, benchmarks); the sweep's verdicts use the family's."""
POWER = 0.80
SAME_MARGIN = 0.02
"""A change inside ±2% counts as "the same" once the interval fits inside that margin."""
SINGLE_RUN_INFLATION = 3.0
"""With one candidate run its own spread is unknown: assumed this many times the reference's (a no-effect knob
with 3× the baseline's spread was called "faster" ~12% of the time when assumed alike), and never a verdict."""
MIN_DECIDING_RUNS = 3
"""Verdicts start at this many candidate runs (why not two: docs/sweep.md, "two guards")."""
METHOD = (
    "fresh-process runs, each paired with the reference runs measured just before and after it; "
    "Welch t-interval on log throughput (candidate and reference run-to-run variances, Welch–Satterthwaite df, at most k−1)"
)


def log_rate(run: Trial) -> float:
    assert run.metrics is not None and run.metrics.samples_per_s
    return math.log(run.metrics.samples_per_s)


def _usable(runs: Sequence[Trial]) -> list[Trial]:
    return sorted((r for r in runs if r.evidence and r.metrics and r.metrics.samples_per_s),
                  key=lambda r: (r.sequence is None, r.sequence or 0))


def _t_sf(x: float, df: float) -> float:
    from scipy.special import stdtr

    return float(stdtr(df, -x))


def mssd_df(n: int) -> float:
    """Effective degrees of freedom of von Neumann's variance estimate from ``n`` values (normal, no drift):
    2(n−1)²/(3n−4), about two thirds of the sample variance's n−1 — the price of robustness to drift."""
    return 2 * (n - 1) ** 2 / (3 * n - 4) if n >= 2 else 0.0


def run_noise(reference_runs: Sequence[Trial]) -> RunNoise:
    var, n_diffs = ReferenceSeries(reference_runs).variance()
    if var is None:
        return RunNoise(runs=len(_usable(reference_runs)), sigma=None)
    se = math.sqrt(var * 1.5)  # one candidate run (varying alike) against two neighbouring reference runs
    return RunNoise(runs=n_diffs + 1, sigma=math.sqrt(var), mde=detectable_change(se, mssd_df(n_diffs + 1), CONFIDENCE))


class ReferenceSeries:
    """The reference's usable runs in measurement order with their log rates. Build it once and pass it to
    `paired_test` for every candidate: a sweep judges every candidate after every run, so the lookups below are
    its inner loop."""

    def __init__(self, runs: Sequence[Trial]) -> None:
        self.runs = _usable(runs)
        self.rates = [log_rate(r) for r in self.runs]
        self._order = [r.sequence if r.sequence is not None else -1 for r in self.runs]
        # The lookups bisect when every run has its own place in the order (always, for a sweep's runs); else scan.
        self._ordered = (all(r.sequence is not None for r in self.runs)
                         and all(a < b for a, b in zip(self._order, self._order[1:])))
        # Runs of a parallel sweep (perfscope.lanes) are compared within their lane only: each lane is its own series,
        # so a lane's speed cancels in every ratio and its successive differences never span two devices.
        lanes = {r.lane for r in self.runs}
        self._lanes = ({lane: ReferenceSeries([r for r in self.runs if r.lane == lane]) for lane in lanes}
                       if len(lanes) > 1 else None)

    def variance(self) -> tuple[float | None, int]:
        """(variance of log throughput between runs, successive differences used) from successive differences
        (pooled over the lanes' own series in a parallel sweep)."""
        if self._lanes is not None:
            parts = [(v, n) for v, n in (s.variance() for s in self._lanes.values()) if v is not None]
            n_all = sum(n for _, n in parts)
            return (sum(v * n for v, n in parts) / n_all, n_all) if n_all else (None, 0)
        if len(self.rates) < 2:
            return None, 0
        diffs = [b - a for a, b in zip(self.rates, self.rates[1:])]
        return sum(d * d for d in diffs) / (2 * len(diffs)), len(diffs)

    def _lane_of(self, run: Trial) -> ReferenceSeries | None:
        """In a parallel sweep, the series of ``run``'s own lane (None when that lane has no reference run)."""
        assert self._lanes is not None
        return self._lanes.get(run.lane)

    def local(self, run: Trial) -> tuple[float, int] | None:
        """Mean log rate of the nearest reference run before and after ``run`` (one side when only one exists)."""
        if self._lanes is not None:
            series = self._lane_of(run)
            return series.local(run) if series is not None else None
        seq = run.sequence if run.sequence is not None else math.inf
        if self._ordered:
            lo, hi = bisect.bisect_left(self._order, seq), bisect.bisect_right(self._order, seq)
            chosen = ([self.rates[lo - 1]] if lo > 0 else []) + ([self.rates[hi]] if hi < len(self.rates) else [])
        else:
            before = [rate for key, rate in zip(self._order, self.rates) if key < seq]
            after = [rate for key, rate in zip(self._order, self.rates) if key > seq]
            chosen = before[-1:] + after[:1]
        if not chosen:
            return None
        return statistics.fmean(chosen), len(chosen)

    def level(self, run: Trial) -> float:
        """Mean log rate of the ``LEVEL_WINDOW`` reference runs nearest ``run`` in the measurement order."""
        if self._lanes is not None:
            series = self._lane_of(run)
            assert series is not None, "level() of a run paired by local() has reference runs on its lane"
            return series.level(run)
        seq = run.sequence if run.sequence is not None else 0
        if not self._ordered:  # sorted by distance; a tie goes to the earlier run
            nearest = sorted(range(len(self.runs)),
                             key=lambda i: abs((self.runs[i].sequence if self.runs[i].sequence is not None else 0) - seq))
            return statistics.fmean(self.rates[i] for i in nearest[:LEVEL_WINDOW])
        left = bisect.bisect_left(self._order, seq) - 1  # the window grows from here, the same choice as above
        right = left + 1
        while right - left - 1 < min(LEVEL_WINDOW, len(self._order)):
            if right >= len(self._order) or (left >= 0 and seq - self._order[left] <= self._order[right] - seq):
                left -= 1
            else:
                right += 1
        return statistics.fmean(self.rates[left + 1:right])


LEVEL_WINDOW = 6
"""Reference runs (the nearest in time) whose mean is the machine's level at a candidate run, for the candidate's
own spread: wide enough that their noise adds little (σ_b²/6), narrow enough to follow slow drift."""


@dataclass(frozen=True)
class PairedTest:
    """One look at a candidate against the reference: mean paired log ratio, its standard error and Welch df.

    Kept apart from the Gain so that the family (perfscope.search.family) can judge many of them together and
    choose each one's confidence; ``decidable`` is False for a single run, whose spread is assumed."""

    mean: float
    se: float
    df: float
    runs: int
    reference_runs: int

    @property
    def decidable(self) -> bool:
        return self.runs >= MIN_DECIDING_RUNS and self.df >= 1 and math.isfinite(self.se)

    @functools.cached_property
    def p(self) -> float:
        """Two-sided p of "no change"; 1 when the look cannot decide (cached: the family asks often)."""
        if not self.decidable:
            return 1.0
        if self.se == 0:
            return 0.0 if self.mean != 0 else 1.0
        return min(1.0, 2 * _t_sf(abs(self.mean) / self.se, self.df))

    def gain(self, confidence: float, *, reference: str = "baseline", method: str = METHOD) -> Gain:
        common = dict(runs=self.runs, reference=reference, reference_runs=self.reference_runs, method=method,
                      confidence=confidence)
        ratio = math.exp(self.mean)
        if self.df < 1 or not math.isfinite(self.se):  # nothing says how noisy this machine is
            return Gain(ratio=ratio, low=0.0, high=math.inf, verdict="undecided", mde=None, **common)
        half = t_quantile(1 - (1 - confidence) / 2, self.df) * self.se
        low, high = math.exp(self.mean - half), exp_or_inf(self.mean + half)
        said = verdict(low, high) if self.decidable else "undecided"
        return Gain(ratio=ratio, low=low, high=high, verdict=said, mde=detectable_change(self.se, self.df, confidence), **common)  # type: ignore[arg-type]


def paired_test(candidate_runs: Sequence[Trial], reference_runs: Sequence[Trial] | ReferenceSeries) -> PairedTest | None:
    """The Welch comparison of the candidate's runs with their neighbouring reference runs (module docstring);
    None without a usable run on each side."""
    candidates = _usable(candidate_runs)
    references = reference_runs if isinstance(reference_runs, ReferenceSeries) else ReferenceSeries(reference_runs)
    paired = [(c, local) for c in candidates if (local := references.local(c)) is not None]
    pairs = [(log_rate(c), local) for c, local in paired]
    if not pairs:
        return None
    diffs = [c - ref for c, (ref, _) in pairs]
    k = len(diffs)
    mean = statistics.fmean(diffs)
    ref_var, n_diffs = references.variance()
    ref_df = mssd_df(n_diffs + 1)
    share = statistics.fmean(1 / m for _, (_, m) in pairs)  # ā: the averaged neighbours' part of a pair's variance
    if k == 1:
        if ref_var is None:
            return PairedTest(mean, math.inf, 0.0, 1, len(references.runs))
        return PairedTest(mean, math.sqrt((SINGLE_RUN_INFLATION ** 2 + share) * ref_var), ref_df, 1, len(references.runs))
    if ref_var is None:  # no reference spread: the pairs' own spread holds both parts (paired t, k−1 df)
        return PairedTest(mean, math.sqrt(statistics.variance(diffs) / k), k - 1, k, len(references.runs))
    own_var = statistics.variance([log_rate(c) - references.level(c) for c, _ in paired])
    # Never quieter than the reference, with the candidate's own k − 1 df (why: docs/sweep.md, "two guards").
    own, own_df = max(own_var, ref_var) / k, k - 1
    theirs = share * ref_var / k
    total = own + theirs
    if total == 0:
        return PairedTest(mean, 0.0, k - 1, k, len(references.runs))
    df = total ** 2 / (own ** 2 / own_df + (theirs ** 2 / ref_df if ref_df > 0 else 0.0))
    # Never more df than the candidate's own k − 1 (docs/sweep.md, "two guards").
    return PairedTest(mean, math.sqrt(total), min(df, own_df), k, len(references.runs))


def compare(candidate_runs: Sequence[Trial], reference_runs: Sequence[Trial], *, reference: str = "baseline",
            confidence: float = CONFIDENCE) -> Gain | None:
    """The candidate's throughput over the reference's, from runs, as one comparison at ``confidence`` (no family
    correction: the sweep's verdicts come from perfscope.search.family); None without a usable run on each side."""
    test = paired_test(candidate_runs, reference_runs)
    return test.gain(confidence, reference=reference) if test is not None else None


def verdict(low: float, high: float) -> str:
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    if low >= 1 - SAME_MARGIN and high <= 1 + SAME_MARGIN:
        return "same"
    return "undecided"


def relative_gain(better: Gain, worse: Gain, *, reference: str) -> Gain:
    """``better`` over ``worse`` (two gains against the same reference) as a Gain whose reference is ``worse``'s
    configuration: what a knob measured on top of another adds to it (the two log-intervals combined as
    independent, at the same confidence)."""
    ratio = better.ratio / worse.ratio
    common = dict(confidence=better.confidence, runs=better.runs, reference=reference, reference_runs=worse.runs,
                  method="ratio of two gains against the same baseline; their intervals combined as independent")
    if not all(math.isfinite(v) and v > 0 for v in (better.low, better.high, worse.low, worse.high)):
        return Gain(ratio=ratio, low=0.0, high=math.inf, verdict="undecided", **common)
    half = math.hypot(math.log(better.high / better.low) / 2, math.log(worse.high / worse.low) / 2)
    low, high = ratio * math.exp(-half), ratio * math.exp(half)
    return Gain(ratio=ratio, low=low, high=high, verdict=verdict(low, high), **common)  # type: ignore[arg-type]


def could_still_win(gain: Gain | None, min_gain: float, max_runs: int | None = None) -> bool:
    """Undecided, its interval still reaches a worthwhile speed-up, and fewer than ``max_runs`` runs: worth
    another run. (The futility stop — more runs would most likely not decide either — is the family's,
    perfscope.search.family.Family.futile: it needs the test's degrees of freedom and the family's level.)"""
    if gain is None or gain.verdict != "undecided" or gain.high < 1 + min_gain:
        return False
    return max_runs is None or gain.runs < max_runs

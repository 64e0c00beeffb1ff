"""Measured speed-ups between two trials, per sample, with their bootstrap interval.

    gain = measured_gain(baseline_trial, candidate_trial)   # Gain(ratio=1.43, low=1.41, high=1.44, significant=True)

Compared per sample (step time / samples per step), so trials with different micro-batches or
accumulation compare on throughput. Because every trial of a run shares one MFU denominator, this
ratio is also the MFU gain. A gain whose interval includes 1.0 is "no significant change", never a win.
Step times within one trial are correlated with that process's luck (clocks, neighbours, allocator
layout), so the sweep re-runs the baseline in a second process and widens every interval by the drift
it sees between the two: a "win" smaller than the noise between identical runs is not reported as one.
"""

from __future__ import annotations

import statistics

from perfscope.results import Gain, Trial
from perfscope.stats import ratio_of_medians


def time_per_sample(trial: Trial) -> list[float]:
    assert trial.metrics is not None
    n = trial.metrics.samples_per_step
    return [t / n for t in trial.metrics.step_times_s]


def measured_gain(baseline: Trial, candidate: Trial, *, drift: float = 0.0, confidence: float = 0.95) -> Gain:
    """Bootstrap interval of the per-sample speed-up, widened by ``drift``: the relative difference seen
    between two processes running the same configuration (the within-trial interval cannot see it)."""
    estimate = ratio_of_medians(time_per_sample(baseline), time_per_sample(candidate), confidence=confidence)
    low, high = estimate.low / (1 + drift), estimate.high * (1 + drift)
    return Gain(
        ratio=estimate.ratio,
        low=low,
        high=high,
        confidence=estimate.confidence,
        significant=low > 1.0 or high < 1.0,
    )


def process_drift(first: Trial, repeat: Trial) -> float:
    """|relative difference| of two runs of the same configuration in fresh processes: the noise floor."""
    a = statistics.median(time_per_sample(first))
    b = statistics.median(time_per_sample(repeat))
    return abs(b / a - 1.0)


def is_win(gain: Gain | None, min_ratio: float = 1.0) -> bool:
    """A significant speed-up of at least ``min_ratio``."""
    return gain is not None and gain.significant and gain.ratio > 1.0 and gain.ratio >= min_ratio

"""The A/A check at the start of a parallel sweep: the baseline on every lane, the lanes compared, an outlier dropped.

Design notes: docs/parallel.md."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from perfscope.stats import robust_sigma

AA_RUNS = 2
"""Baseline runs per lane in the A/A check."""
OUTLIER_RATIO = 1.25
"""A lane this much faster or slower than the median lane is an outlier (the GPU-to-GPU spread of one model is ~8 %)."""
MAD_LIMIT = 2.5
"""... and further than this many robust standard deviations (1.4826 × the median absolute deviation) of the lanes'
levels: a machine whose lanes all spread widely does not lose its slowest lane for being at one end of the spread."""
MIN_LANES_FOR_OUTLIERS = 3


@dataclass
class AACheck:
    levels: dict[int, float]
    """Lane -> its mean log baseline throughput over the median lane's (0 = the median lane)."""
    spread: float | None
    """Standard deviation of the kept lanes' levels (log): the lane-to-lane spread."""
    outliers: dict[int, str] = field(default_factory=dict)
    """Lane -> why it was dropped."""


def check_lanes(rates: dict[int, list[float]]) -> AACheck:
    """``rates``: each lane's A/A log throughputs (a lane without any has failed and is not judged here)."""
    means = {lane: statistics.fmean(r) for lane, r in rates.items() if r}
    if not means:
        return AACheck({}, None)
    middle = statistics.median(means.values())
    levels = {lane: m - middle for lane, m in means.items()}
    outliers: dict[int, str] = {}
    if len(means) >= MIN_LANES_FOR_OUTLIERS:
        limit = max(math.log(OUTLIER_RATIO), MAD_LIMIT * robust_sigma(list(levels.values()), 0.0))
        for lane, level in levels.items():
            if abs(level) > limit:
                outliers[lane] = (f"A/A outlier: its baseline ran at {math.exp(level):.2f}× the median lane's "
                                  f"(the limit is {math.exp(limit):.2f}×): dropped before the sweep")
    kept = [v for lane, v in levels.items() if lane not in outliers]
    spread = statistics.stdev(kept) if len(kept) >= 2 else None
    return AACheck(levels, spread, outliers)

"""Summaries and uncertainty shared by the sweep, the CI gate and the analysis: the t machinery (quantiles,
detectable change, power), a rank test, and the straggler test.

Design notes: docs/internals.md."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace


@dataclass(kw_only=True)
class Summary:
    """Robust description of a sample: medians and percentiles, since step times have long right tails."""

    n: int
    median: float
    p10: float
    p90: float
    mean: float
    stdev: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width a reader should expect between runs."""
        return (self.p90 - self.p10) / self.median if self.median else math.nan


def summarize(samples: Sequence[float]) -> Summary:
    """Summary of a non-empty sample. Raises ValueError on an empty one: there is nothing honest to report.
    Deciles interpolate linearly between order statistics (numpy's default)."""
    if not samples:
        raise ValueError("cannot summarize an empty sample")
    values = sorted(float(v) for v in samples)
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
    return Summary(
        n=len(values),
        median=statistics.median(values),
        p10=deciles[0],
        p90=deciles[-1],
        mean=statistics.fmean(values),
        stdev=statistics.stdev(values) if len(values) > 1 else 0.0,
        min=values[0],
        max=values[-1],
    )


MAD_TO_SIGMA = 1.4826
"""The median absolute deviation × this estimates σ of a normal sample, unmoved by a few outliers."""


def robust_sigma(values: Sequence[float], center: float) -> float:
    """σ from the median absolute deviation around ``center`` (the watch's reference steps, the A/A lane levels)."""
    return MAD_TO_SIGMA * statistics.median(abs(v - center) for v in values)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (scipy: exact for small samples, tie-corrected otherwise)."""
    from scipy.stats import (
        mannwhitneyu,  # imported here: scipy costs ~0.8 s, and trial processes never test
    )

    return float(mannwhitneyu(list(a), list(b), alternative="two-sided").pvalue)


def confidence_text(confidence: float) -> str:
    """A confidence level as a reader can trust it: "99%", "99.8%", "99.995%" — never "100%", which the family's
    small per-look error levels rounded to (an interval at 100% would claim certainty)."""
    for digits in range(6):
        shown = round(confidence * 100, digits)
        if shown < 100 or confidence >= 1:
            return f"{shown:.{digits}f}%"
    return f"{confidence * 100:.6f}%"


def t_quantile(q: float, df: float) -> float:
    """Student's t q-quantile with ``df`` degrees of freedom. scipy.special's ufunc, not scipy.stats (50× less
    overhead per call: the sweep's family asks for hundreds per judgement, the simulation for millions);
    imported here: scipy costs ~0.8 s and trial processes never test."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def exp_or_inf(x: float) -> float:
    """exp, unbounded above: a look at a tiny error level with few degrees of freedom has a t quantile in the
    thousands; that interval is unbounded, not an OverflowError."""
    return math.exp(x) if x < 700 else math.inf


def detectable_change(se: float, df: float, confidence: float, power: float = 0.80) -> float | None:
    """The smallest relative change a two-sided test at ``confidence`` finds with ``power``, for a log difference
    with standard error ``se`` on ``df`` degrees of freedom; None when nothing says how noisy the runs are."""
    if df < 1 or not math.isfinite(se):
        return None
    return exp_or_inf((t_quantile(1 - (1 - confidence) / 2, df) + t_quantile(power, df)) * se) - 1


def power_at(se: float, df: float, effect: float, confidence: float) -> float | None:
    """The chance that a two-sided test at ``confidence`` finds a log change of ``effect`` significant; the same
    chance that the interval of identical code excludes a change of ``effect`` (the gate's PASS). None when
    nothing says how noisy the runs are."""
    if df < 1 or not math.isfinite(se) or se <= 0:
        return None
    from scipy.special import stdtr

    return float(stdtr(df, abs(effect) / se - t_quantile(1 - (1 - confidence) / 2, df)))


# ---- slower than its peers: the straggler test of measure/ranks.py, find_stragglers (local windows) and trace/offline.py
# (traced steps), one implementation so that both name a straggler on the same evidence -----------------------------

STRAGGLER_MIN_STEPS = 3
"""Steps a rank needs to be tested (a variance from fewer is meaningless)."""
STRAGGLER_MIN_SLOWER = 0.05
"""A straggler is more than this much slower than its peers (smaller gaps are not worth a finding)."""
_T_9999 = [(1, 3183.1), (2, 70.70), (3, 22.20), (4, 13.03), (5, 9.678), (6, 8.025), (7, 7.063), (8, 6.442), (9, 6.010),
           (10, 5.694), (12, 5.263), (15, 4.880), (20, 4.539), (30, 4.234), (60, 3.962), (120, 3.837), (1000, 3.733)]
"""One-sided 0.9999 quantiles of Student's t by degrees of freedom (a table: no scipy for the straggler test)."""


def t_9999(df: float) -> float:
    """The 0.9999 quantile of Student's t at the largest tabulated df not above ``df`` (conservative)."""
    return next((value for tabulated, value in reversed(_T_9999) if df >= tabulated), _T_9999[0][1])


@dataclass(frozen=True, kw_only=True)
class SlowerThanPeers:
    """One rank's steps found slower than its peers' beyond the noise (`slower_than_peers`)."""

    mean: float
    """The rank's mean step (seconds)."""
    n: int
    """Its steps."""
    reference: float
    """The median of the other ranks' means (seconds)."""
    critical: float
    """The t critical value the gap had to exceed, in standard errors."""
    se: float
    """The standard error of the gap (seconds)."""
    slowest_in: int = 0
    """The steps (of the ``compared``: the shortest window's) in which it was the slowest of the ``ranks`` tested."""
    compared: int = 0
    ranks: int = 0

    @property
    def slower_by(self) -> float:
        return self.mean / self.reference - 1

    @property
    def slowest_share(self) -> float:
        """The share of the compared steps in which it was the slowest rank."""
        return self.slowest_in / self.compared

    @property
    def gap(self) -> float:
        return self.mean - self.reference

    def evidence(self, rank: int, what: str, steps: str) -> list[str]:
        """The test in words: ``what`` the times are ("own compute step"), ``steps`` what they were ("traced steps")."""
        return [f"rank {rank}'s {what} averaged {fmt_ms(self.mean)} over {self.n} {steps}, {self.slower_by:.0%} above the "
                f"{fmt_ms(self.reference)} median of the other ranks; the step-to-step noise allows "
                f"{fmt_ms(self.critical * self.se)} ({self.critical:.1f} standard errors)",
                f"it was the slowest rank in {self.slowest_in} of {self.compared} {steps} (chance alone: 1 in {self.ranks})"]


STRAGGLER_TEST = (f"against the median of the other ranks' means: a straggler is over {STRAGGLER_MIN_SLOWER:.0%} slower "
                  "and slower beyond the step-to-step noise (one-sided Welch t-test, p < 0.0001)")


def fmt_ms(seconds: float) -> str:
    """Seconds in milliseconds, three significant digits: a step time in a straggler's evidence or a watch alarm."""
    return f"{seconds * 1e3:.3g} ms"


def slower_than_peers(times: Sequence[float], others: Sequence[Sequence[float]], *,
                      min_slower: float = STRAGGLER_MIN_SLOWER) -> SlowerThanPeers | None:
    """Is a rank with steps ``times`` slower than the ranks with steps ``others`` (each at least 2 steps)?"""
    mean, n = statistics.fmean(times), len(times)
    reference = statistics.median(statistics.fmean(t) for t in others)
    if reference <= 0 or mean <= reference * (1 + min_slower):
        return None
    n_ref = round(statistics.median(len(t) for t in others))
    a = statistics.variance(times) / n
    b = statistics.fmean(statistics.variance(t) for t in others) / n_ref  # pooled within-rank variance
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a * a / (n - 1) + b * b / (n_ref - 1)) if a + b > 0 else math.inf
    critical = t_9999(df)
    if mean - reference <= critical * se:
        return None
    return SlowerThanPeers(mean=mean, n=n, reference=reference, critical=critical, se=se)


def slower_ranks(times: Mapping[int, Sequence[float]]) -> dict[int, SlowerThanPeers]:
    """Each rank of ``times`` (two or more, each with STRAGGLER_MIN_STEPS steps or more) found slower than the
    others, the most slower first."""
    compared = min(len(t) for t in times.values())
    slowest = [max(times, key=lambda r: times[r][i]) for i in range(compared)]
    found = {rank: replace(test, slowest_in=slowest.count(rank), compared=compared, ranks=len(times))
             for rank, own in times.items()
             if (test := slower_than_peers(own, [t for r, t in times.items() if r != rank])) is not None}
    return dict(sorted(found.items(), key=lambda item: -item[1].slower_by))

"""How far a new session's mean may stray from a stored baseline's: the between-session variance.

    spread = session_spread([[l1, l2, l3], [l4, l5, l6]], current=[c1, c2, c3], allowance=None)
    spread.variance, spread.df      # of (current mean - mean of the session means), log values

The model (one-way random effects, on log values): a run's value = level + session offset (variance tau^2: the
machine, the day, the power cap, the runner's cores) + run noise (variance sigma^2). The baseline level is the
mean of its J session means; the current session is one more draw of an offset. So

    Var(current mean - baseline level) = tau^2 (1 + 1/J) + sigma^2 (1/m + mean(1/n_j) / J)

Across sessions the unit of replication is the session, as the run is within one: the spread of the J session
means, s_b^2 (J - 1 degrees of freedom), estimates tau^2 + sigma^2 mean(1/n_j) directly, so it is used as is,
with J - 1 degrees of freedom (few sessions: a wide t quantile, never a confident guess). One session has no
spread: nothing can tell a code change from a machine offset, unless the user states an allowance for tau.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

ONE_SESSION = (
    "one stored session cannot tell a code change from a machine/day offset: store >= 2 sessions with "
    "`perfscope baseline update`, or use `perfscope ab` (baseline and candidate interleaved in one job)"
)


@dataclass(frozen=True, kw_only=True)
class SessionSpread:
    """The variance of the comparison across sessions, the baseline level, and what they rest on."""

    baseline_level: float  # mean of the session means (log)
    current_level: float  # mean of the current runs (log)
    sessions: int  # stored sessions with at least one run
    variance: float | None  # of current_level - baseline_level; None: cannot be estimated
    df: float
    between_sd: float | None  # estimated sd of the session offsets (tau), log units
    within_sd: float | None  # pooled run-to-run sd within sessions (sigma)
    how: str
    refusal: str = ""  # why variance is None


def _pooled_within(groups: list[list[float]]) -> tuple[float | None, int]:
    df = sum(len(g) - 1 for g in groups if len(g) > 1)
    if df == 0:
        return None, 0
    ss = sum((len(g) - 1) * statistics.variance(g) for g in groups if len(g) > 1)
    return ss / df, df


def session_spread(baseline_sessions: list[list[float]], current: list[float], *, allowance: float | None) -> SessionSpread:
    """The comparison's variance from the stored sessions' log values and the current runs' (see the module).

    ``allowance``: the user's stated relative sd of session offsets (0.03: machines and days differ by about
    3%); it replaces the estimate from the history (and lets one stored session decide).
    """
    groups = [g for g in baseline_sessions if g]
    j, m = len(groups), len(current)
    means = [statistics.fmean(g) for g in groups]
    base, cur = statistics.fmean(means), statistics.fmean(current)
    sigma2, df_w = _pooled_within([*groups, current])
    h = statistics.fmean(1 / len(g) for g in groups)
    within = sigma2 * (1 / m + h / j) if sigma2 is not None else None
    common = dict(baseline_level=base, current_level=cur, sessions=j,
                  within_sd=math.sqrt(sigma2) if sigma2 is not None else None)
    if allowance is not None:
        tau2 = math.log1p(allowance) ** 2
        if within is None:
            return SessionSpread(variance=None, df=0, between_sd=math.sqrt(tau2), **common,
                                 how="", refusal="no session has two runs: the run-to-run noise is unknown")
        return SessionSpread(variance=tau2 * (1 + 1 / j) + within, df=df_w, between_sd=math.sqrt(tau2), **common,
                             how=f"between-session allowance {allowance:.1%} (stated with --between-session)")
    if j < 2:
        return SessionSpread(variance=None, df=0, between_sd=None, how="", refusal=ONE_SESSION, **common)
    s_b2 = statistics.variance(means)
    variance = s_b2 * (1 + 1 / j) + (max(0.0, sigma2 * (1 / m - h)) if sigma2 is not None else 0.0)
    if within is not None:
        variance = max(variance, within)  # never tighter than the run-to-run noise alone
    tau2 = max(0.0, s_b2 - (sigma2 or 0.0) * h)
    return SessionSpread(variance=variance, df=j - 1, between_sd=math.sqrt(tau2), **common,
                         how=f"between-session spread from {j} stored sessions ({j - 1} df): about {math.sqrt(tau2):.1%}")


__all__ = ["ONE_SESSION", "SessionSpread", "session_spread"]

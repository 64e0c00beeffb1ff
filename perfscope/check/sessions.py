"""How far a new session's mean may stray from a stored baseline's: run noise, days and hosts, each apart.

    spread = session_spread([StoredSession([l1, l2, l3], host="a"), ...], current=[c1, c2, c3], current_host="a")
    spread.variance, spread.df      # of (current mean - baseline level), log values

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from perfscope.results.messages import Message, msg

DEFAULT_BETWEEN_SESSION = 0.05
"""Assumed sd of day-to-day offsets on one host when the history cannot estimate it: above the 1-4% seen between
jobs on one CI runner (issue 25, 35), so that identical code rarely fails while a 29% drop does."""
DEFAULT_BETWEEN_HOST = 0.05
"""Assumed sd of offsets between hosts of one hardware kind (power caps, clocks: two H100 nodes 6% apart)."""
MIN_SPREAD_DF = 4
"""Degrees of freedom from which a spread is estimated from the history rather than assumed."""


@dataclass(frozen=True, kw_only=True)
class StoredSession:
    values: list[float]  # log values of its runs
    host: str = ""


@dataclass(frozen=True, kw_only=True)
class SessionSpread:
    """The variance of the comparison across sessions, the baseline level, and what they rest on."""

    baseline_level: float  # log
    current_level: float
    sessions: int  # stored sessions with at least one run
    hosts: int
    new_host: bool  # the current host is not in the history
    variance: float | None  # of current_level - baseline_level; None: cannot be estimated
    df: float
    between_sd: float | None  # sd of session offsets used (tau), log units
    host_sd: float | None  # sd of host offsets used (eta); None: not part of this comparison
    within_sd: float | None  # pooled run-to-run sd (sigma)
    how: list[Message]  # what the spread rests on, "; "-joined in the verdict's runs_compared
    assumed: bool = False  # a default stood in for a spread the history cannot estimate
    refusal: Message | None = None  # why variance is None


def _var(values: list[float]) -> float:
    return statistics.variance(values) if len(values) > 1 else 0.0


def _satterthwaite(terms: list[tuple[float, float]]) -> float:
    """df of a sum of variance terms (value, df); df = inf for a known term."""
    total = sum(v for v, _ in terms)
    denominator = sum(v * v / df for v, df in terms if math.isfinite(df) and df > 0 and v > 0)
    return total * total / denominator if denominator > 0 else math.inf


def _run_noise(groups: list[list[float]], current: list[float]) -> tuple[list[tuple[float, float]], float | None, float]:
    """Welch terms of the run noise (current side, baseline sessions), the pooled sigma, its df. Without two
    runs on the current side, both sides share the pooled variance."""
    j = len(groups)
    m = len(current)
    h = statistics.fmean(1 / len(g) for g in groups)
    df_b = sum(len(g) - 1 for g in groups)
    s_b2 = sum((len(g) - 1) * _var(g) for g in groups) / df_b if df_b else None
    df_all = df_b + max(0, m - 1)
    pooled = (sum((len(g) - 1) * _var(g) for g in [*groups, current]) / df_all) if df_all else None
    if pooled is None:
        return [], None, 0
    if m >= 2 and s_b2 is not None:
        return [(_var(current) / m, m - 1), (s_b2 * h / j, df_b)], math.sqrt(pooled), df_all
    return [(pooled * (1 / m + h / j), df_all)], math.sqrt(pooled), df_all


def _host_spread(means: list[float], stated: float | None, default: float) -> tuple[float, float, Message, bool]:
    """(variance of the host offsets, its df, how, assumed) from the hosts' means."""
    if stated is not None:
        return math.log1p(stated) ** 2, math.inf, msg("spread_stated", unit="host", value=stated), False
    df = len(means) - 1
    observed = _var(means)
    if df >= MIN_SPREAD_DF:
        return observed, df, msg("spread_estimated", unit="host", units=len(means), df=df, sd=math.sqrt(observed)), False
    guess = math.log1p(default) ** 2
    if observed > guess:
        return observed, math.inf, msg("host_spread_above_default", sd=math.sqrt(observed)), True
    return guess, math.inf, msg("host_spread_assumed", default=default, hosts=len(means), needed=MIN_SPREAD_DF + 1), True


def session_spread(baseline_sessions: list[StoredSession], current: list[float], *, current_host: str = "",
                   between_session: float | None = None, between_host: float | None = None) -> SessionSpread:
    """The comparison's variance from the stored sessions' log values and the current runs' (see the module).

    ``between_session`` / ``between_host``: the user's stated relative sd of day and host offsets (0.03: about
    3%); they replace the estimate (or the default)."""
    stored = [s for s in baseline_sessions if s.values]
    groups = [s.values for s in stored]
    hosts: dict[str, list[list[float]]] = {}
    for s in stored:
        hosts.setdefault(s.host, []).append(s.values)
    cur = statistics.fmean(current)
    new_host = current_host not in hosts
    noise, sigma, _ = _run_noise(groups, current)
    # day-to-day on one host: session means around their host's mean, pooled over hosts
    deviations = [statistics.fmean(g) - statistics.fmean(statistics.fmean(x) for x in hs)
                  for hs in hosts.values() for g in hs]
    df_tau = len(groups) - len(hosts)
    estimated = between_session is None and df_tau >= MIN_SPREAD_DF
    if between_session is not None:
        tau2, tau_df, assumed = math.log1p(between_session) ** 2, math.inf, False
        how = [msg("spread_stated", unit="session", value=between_session)]
    elif estimated:
        tau2 = sum(d * d for d in deviations) / df_tau
        tau_df, assumed = df_tau, False
        how = [msg("spread_estimated", unit="session", units=len(groups), df=df_tau, sd=math.sqrt(tau2))]
    else:
        observed = sum(d * d for d in deviations) / df_tau if df_tau else 0.0
        tau2, tau_df, assumed = max(math.log1p(DEFAULT_BETWEEN_SESSION) ** 2, observed), math.inf, True
        how = [msg("session_spread_assumed", sd=math.sqrt(tau2), sessions=len(groups), needed=MIN_SPREAD_DF + 1)]
    if sigma is None:
        return SessionSpread(baseline_level=statistics.fmean(statistics.fmean(g) for g in groups), current_level=cur,
                             sessions=len(groups), hosts=len(hosts), new_host=new_host, variance=None, df=0,
                             between_sd=math.sqrt(tau2), host_sd=None, within_sd=None, how=[],
                             refusal=msg("run_noise_unknown"))
    eta = None
    if not new_host:
        mine = hosts[current_host]
        base = statistics.fmean(statistics.fmean(g) for g in mine)
        j = len(mine)
        if estimated:
            # the spread of session means holds sigma^2/n too: use it as is, the current side's extra noise added
            h = statistics.fmean(1 / len(g) for g in mine)
            extra = max(0.0, (sigma ** 2) * (1 / len(current) - h))
            terms = [(tau2 * (1 + 1 / j), tau_df), (extra, math.inf)]
            terms = max(terms, noise, key=lambda t: sum(v for v, _ in t))  # never tighter than the run noise alone
        else:
            terms = [(tau2 * (1 + 1 / j), tau_df), *noise]
    else:
        host_means = [statistics.fmean(statistics.fmean(g) for g in hs) for hs in hosts.values()]
        base = statistics.fmean(host_means)
        k = len(host_means)
        if between_host is None and k - 1 >= MIN_SPREAD_DF:
            # hosts' mean spread holds eta^2 + tau^2/J_h + sigma^2/(n J_h): as is, plus what a new session adds
            s_h2 = _var(host_means)
            share = statistics.fmean(1 / len(hs) for hs in hosts.values())
            terms = [(s_h2 * (1 + 1 / k), k - 1), (tau2 * (1 - share), tau_df), *noise]
            eta = math.sqrt(max(0.0, s_h2 - tau2 * share))
            if share == 1:  # one session per host (hosted runners): the host spread holds the days' too
                how, assumed = [], False
            how = [msg("spread_estimated", unit="host", units=k, df=k - 1, sd=math.sqrt(s_h2)), *how]
        else:
            eta2, eta_df, host_how, host_assumed = _host_spread(host_means, between_host, DEFAULT_BETWEEN_HOST)
            terms = [(eta2 * (1 + 1 / k), eta_df), (tau2 * (1 + 1 / len(groups)), tau_df), *noise]
            eta, assumed = math.sqrt(eta2), assumed or host_assumed
            how = [msg("host_not_in_history", host=current_host, hosts=k, spread=host_how), *how]
    variance = sum(v for v, _ in terms)
    return SessionSpread(baseline_level=base, current_level=cur, sessions=len(groups), hosts=len(hosts),
                         new_host=new_host, variance=variance, df=_satterthwaite(terms), between_sd=math.sqrt(tau2),
                         host_sd=eta, within_sd=sigma, how=how, assumed=assumed)


__all__ = ["DEFAULT_BETWEEN_HOST", "DEFAULT_BETWEEN_SESSION", "MIN_SPREAD_DF", "SessionSpread",
           "StoredSession", "session_spread"]

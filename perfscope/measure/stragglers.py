"""Stragglers: ranks whose own compute is slower than their peers' beyond the step-to-step noise.

Design notes: docs/measurement.md."""

from __future__ import annotations

import statistics

from perfscope.results.distributed import RankMetrics, Straggler
from perfscope.stats import STRAGGLER_MIN_SLOWER as MIN_SLOWER
from perfscope.stats import STRAGGLER_MIN_STEPS as MIN_STEPS
from perfscope.stats import slower_than_peers

EXPLAINS = 0.5
"""A cause must account for this share of the gap (seconds per step) to be named."""
MIN_EXTRA_CORES = 0.5
"""Host contention: other processes used at least this many more cores on the rank's machine than on its peers'."""


def find_stragglers(ranks: list[RankMetrics]) -> tuple[list[Straggler], str]:
    """(stragglers, method in words); no stragglers when fewer than two ranks have a local window."""
    tested = [r for r in ranks if len(r.local_step_times_s) >= MIN_STEPS]
    if len(tested) < 2:
        return [], (f"not tested: {len(tested)} rank(s) measured a local window (compute without gradient "
                    f"communication) of at least {MIN_STEPS} steps; it takes two")
    slowest = _slowest_counts(tested)
    found = [s for r in tested if (s := _test(r, [o for o in tested if o is not r], slowest)) is not None]
    steps = sorted({len(r.local_step_times_s) for r in tested})
    left_out = [r.rank for r in ranks if r not in tested]
    method = (
        "each rank's mean local step (its own compute, without gradient communication) against the median of the "
        f"other ranks' means: a straggler is over {MIN_SLOWER:.0%} slower and slower beyond the step-to-step noise "
        f"(one-sided Welch t-test, p < 0.0001); {len(tested)} ranks, "
        f"{steps[0] if len(steps) == 1 else f'{steps[0]}–{steps[-1]}'} local steps each"
        + (f"; ranks {', '.join(map(str, left_out))} not tested (no local window)" if left_out else "")
    )
    return sorted(found, key=lambda s: -s.slower_by), method


def _test(r: RankMetrics, others: list[RankMetrics], slowest: tuple[dict[int, int], int]) -> Straggler | None:
    test = slower_than_peers(r.local_step_times_s, [o.local_step_times_s for o in others])  # perfscope.stats
    if test is None:
        return None
    mean, n, reference, critical, se, gap = test.mean, test.n, test.reference, test.critical, test.se, test.gap
    counts, steps = slowest
    cause, why = _cause(r, others, gap)
    return Straggler(
        rank=r.rank, slower_by=mean / reference - 1, slowest_share=counts.get(r.rank, 0) / steps if steps else 0.0,
        cause=cause,
        evidence=[
            f"rank {r.rank}'s own compute step (no gradient communication) averaged {_ms(mean)} over {n} steps, "
            f"{mean / reference - 1:.0%} above the {_ms(reference)} median of the other ranks; the step-to-step noise "
            f"allows {_ms(critical * se)} ({critical:.1f} standard errors)",
            f"it was the slowest rank in {counts.get(r.rank, 0)} of {steps} steps (chance alone: 1 in {len(others) + 1})",
            *why,
        ],
    )


def _cause(r: RankMetrics, others: list[RankMetrics], gap: float) -> tuple[str, list[str]]:
    """The cause accounting for most of ``gap`` (seconds per step), and the evidence lines for it."""
    step = r.mean_step_time_s or statistics.fmean(r.local_step_times_s)
    data_ref = statistics.median(o.data_wait_share for o in others)
    extra_data = (r.data_wait_share - data_ref) * step
    gc_ref = _median([_gc_per_step(o) for o in others])
    gc_own = _gc_per_step(r)
    extra_gc = gc_own - gc_ref if gc_own is not None and gc_ref is not None else None
    cores_ref = _median([o.other_cpu_cores for o in others])
    extra_cores = r.other_cpu_cores - cores_ref if r.other_cpu_cores is not None and cores_ref is not None else None
    candidates = [("data", extra_data), ("gc", extra_gc if extra_gc is not None else 0.0)]
    cause, extra = max(candidates, key=lambda c: c[1])
    if extra >= EXPLAINS * gap:
        if cause == "data":
            return "data", [f"it waited for data {r.data_wait_share:.0%} of its steps against {data_ref:.0%} on the "
                            f"others: {_ms(extra)} more a step, {min(extra / gap, 1):.0%} of the gap"]
        return "gc", [f"Python's garbage collector paused it {_ms(gc_own or 0)} a step against {_ms(gc_ref or 0)} on "
                      f"the others: {_ms(extra)} more a step, {min(extra / gap, 1):.0%} of the gap"]
    if extra_cores is not None and extra_cores >= MIN_EXTRA_CORES:
        return "host contention", [f"other processes used {r.other_cpu_cores:.1f} cores on its machine during its "
                                   f"window against {cores_ref:.1f} on the others'"]
    checked = [name for name, known in (("data wait", True), ("GC pauses", extra_gc is not None),
                                        ("other processes' CPU use", extra_cores is not None)) if known]
    listed = checked[0] if len(checked) == 1 else f"{', '.join(checked[:-1])} or {checked[-1]}"
    return "compute", [f"no difference in {listed} accounts for the gap: its own compute is slower "
                       "(a slower or throttled device, a larger shard, different work)"]


def _slowest_counts(ranks: list[RankMetrics]) -> tuple[dict[int, int], int]:
    """{rank: steps in which it was the slowest}, and the steps compared (the shortest window's)."""
    steps = min(len(r.local_step_times_s) for r in ranks)
    counts: dict[int, int] = {}
    for i in range(steps):
        rank = max(ranks, key=lambda r: r.local_step_times_s[i]).rank
        counts[rank] = counts.get(rank, 0) + 1
    return counts, steps


def _gc_per_step(r: RankMetrics) -> float | None:
    return r.gc_pause_s / r.steps if r.gc_pause_s is not None and r.steps else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


__all__ = ["find_stragglers"]

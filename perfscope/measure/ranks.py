"""One rank's summary of its own window (RankMetrics), for the trials' torchrun ranks and the hooks' alike.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Sequence

from perfscope.measure.gc_pauses import GcPauses
from perfscope.measure.metrics import window_totals
from perfscope.results import MemoryBreakdown, TrialMetrics, Window
from perfscope.results.distributed import RankMetrics
from perfscope.results.messages import Message, msg

NO_GC_TRACKING = msg("gc_not_tracked")


def window_mean(windows: Sequence[Window], reading: str) -> float | None:
    """The wall-weighted mean of a contention ``reading`` ("other_cpu_cores", "own_cpu_cores") over the windows
    that have it; None when none does."""
    measured = [(getattr(w.contention, reading), w.wall_s) for w in windows if w.contention is not None
                and getattr(w.contention, reading) is not None]
    wall = sum(s for _, s in measured)
    return sum(v * s for v, s in measured) / wall if wall > 0 else None


def rank_metrics(metrics: TrialMetrics | None, *, rank: int, local_rank: int, node: str,
                 owners: MemoryBreakdown | None = None, gc_pauses: GcPauses | None = None,
                 why_none: Message | None = None) -> RankMetrics:
    """This rank's RankMetrics from its own TrialMetrics (None: nothing timed, ``why_none`` says why).

    ``owners``: the memory owners when ``metrics`` has none (a rank with no timed step still holds its shards).
    """
    ranked = RankMetrics(rank=rank, local_rank=local_rank, node=node)
    owners = metrics.memory_breakdown if metrics is not None and metrics.memory_breakdown is not None else owners
    if owners is not None:
        ranked.parameter_bytes = owners.parameters
        ranked.gradient_bytes = owners.gradients
        ranked.optimizer_state_bytes = owners.optimizer_state
    else:
        ranked.unavailable["parameter_bytes"] = msg("owners_not_counted")
    if gc_pauses is not None:
        ranked.gc_collections, ranked.gc_pause_s = gc_pauses.collections, gc_pauses.pause_s
    else:
        ranked.unavailable["gc_collections"] = NO_GC_TRACKING
    if metrics is None:
        ranked.unavailable["steps"] = why_none or msg("no_timed_step")
        return ranked
    ranked.steps, ranked.wall_s = metrics.steps, metrics.wall_s
    ranked.samples = window_totals(metrics.windows)[1] if metrics.windows else None
    ranked.samples_per_s = metrics.samples_per_s
    ranked.step_times_s = list(metrics.step_times_s)
    ranked.data_wait_share = metrics.data_wait_share
    ranked.peak_memory_bytes = metrics.peak_memory_bytes
    ranked.other_cpu_cores = window_mean(metrics.windows, "other_cpu_cores")
    if ranked.other_cpu_cores is None:
        ranked.unavailable["other_cpu_cores"] = msg("no_load_measured")
    return ranked

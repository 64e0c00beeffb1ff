"""One rank's summary of its own window (RankMetrics), for the trials' torchrun ranks and the hooks' alike.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Sequence

from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.measure.stragglers import find_stragglers
from perfscope.measure.window import GcPauses, window_totals
from perfscope.results import Environment, MemoryBreakdown, Peak, TrialMetrics, Window
from perfscope.results.distributed import DistributedFacts, RankMetrics
from perfscope.results.job import job_samples_per_s, job_steps_per_s, rank_peak
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


def combine_ranks(ranks: list[RankMetrics], *, backend: str, data_parallel: str, nnodes: int, nproc_per_node: int,
                  global_batch: int | None, model_parallel: int = 1) -> DistributedFacts:
    """The job's facts from every rank's own measurement (rank order)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    stragglers, method = find_stragglers(ranks)
    slowest = max(ranks, key=lambda r: r.wall_s / r.steps if r.steps else 0.0).rank if ranks else None
    return DistributedFacts(
        world_size=len(ranks), nnodes=nnodes, nproc_per_node=nproc_per_node, backend=backend,
        data_parallel=data_parallel, global_batch=global_batch, job_samples_per_s=job_samples_per_s(ranks, model_parallel),
        slowest_rank=slowest, ranks=ranks, stragglers=stragglers, straggler_method=method,
    )


def apply_job(metrics: TrialMetrics, facts: DistributedFacts, *, peak: Peak | None, env: Environment) -> None:
    """Make a rank's trial metrics the job's: what `perfscope check` gates and the report's headline read."""
    metrics.distributed = facts
    rate = job_steps_per_s(facts)
    if facts.job_samples_per_s is None or rate is None:
        why = facts.unavailable.get("job_samples_per_s") or msg("rank_window_unknown")
        for name in ("samples_per_s", "tokens_per_s", "mfu"):
            metrics.unavailable[name] = msg("job_figure_unknown", why=why)
        metrics.samples_per_s = metrics.tokens_per_s = None
        return
    if metrics.tokens_per_s is not None and metrics.samples_per_s:
        metrics.tokens_per_s *= facts.job_samples_per_s / metrics.samples_per_s
    metrics.samples_per_s = facts.job_samples_per_s
    apply_utilization_ratios(metrics, rank_peak(peak, env, facts.nproc_per_node), env, steps_per_s=rate)

"""The job a data-parallel run's ranks make together: its throughput is all their work over the slowest window.

Design notes: docs/measurement.md."""

from __future__ import annotations

from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.measure.stragglers import find_stragglers
from perfscope.results import Environment, Peak, TrialMetrics
from perfscope.results.distributed import DistributedFacts, RankMetrics
from perfscope.results.job import job_samples_per_s, job_steps_per_s, rank_peak
from perfscope.results.messages import msg


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

"""One rank's summary of its own window (RankMetrics), for the trials' torchrun ranks and the hooks' alike.

Design notes: docs/measurement.md."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.measure.window import GcPauses, window_totals
from perfscope.results import Environment, MemoryBreakdown, Peak, TrialMetrics, Window
from perfscope.results.distributed import DistributedFacts, RankMetrics, Straggler
from perfscope.results.job import job_samples_per_s, job_steps_per_s, rank_peak
from perfscope.results.messages import Message, msg
from perfscope.stats import STRAGGLER_MIN_STEPS as MIN_STEPS
from perfscope.stats import STRAGGLER_TEST, fmt_ms, slower_ranks


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
        ranked.unavailable["gc_collections"] = msg("gc_not_tracked")
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


EXPLAINS = 0.5
"""A cause must account for this share of the gap (seconds per step) to be named."""
MIN_EXTRA_CORES = 0.5
"""Host contention: other processes used at least this many more cores on the rank's machine than on its peers'."""


def find_stragglers(ranks: list[RankMetrics]) -> tuple[list[Straggler], str]:
    """(stragglers, method in words); no stragglers when fewer than two ranks have a local window."""
    tested = {r.rank: r for r in ranks if len(r.local_step_times_s) >= MIN_STEPS}
    if len(tested) < 2:
        return [], (f"not tested: {len(tested)} rank(s) measured a local window (compute without gradient "
                    f"communication) of at least {MIN_STEPS} steps; it takes two")
    found = slower_ranks({rank: r.local_step_times_s for rank, r in tested.items()})
    steps = sorted({len(r.local_step_times_s) for r in tested.values()})
    left_out = [r.rank for r in ranks if r.rank not in tested]
    method = (
        f"each rank's mean local step (its own compute, without gradient communication) {STRAGGLER_TEST}; "
        f"{len(tested)} ranks, {steps[0] if len(steps) == 1 else f'{steps[0]}–{steps[-1]}'} local steps each"
        + (f"; ranks {', '.join(map(str, left_out))} not tested (no local window)" if left_out else "")
    )
    stragglers = []
    for rank, test in found.items():
        cause, why = _cause(tested[rank], [o for o in tested.values() if o.rank != rank], test.gap)
        stragglers.append(Straggler(
            rank=rank, slower_by=test.slower_by, slowest_share=test.slowest_share, cause=cause,
            evidence=[*test.evidence(rank, "own compute step (no gradient communication)", "steps"), *why]))
    return stragglers, method


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
                            f"others: {fmt_ms(extra)} more a step, {min(extra / gap, 1):.0%} of the gap"]
        return "gc", [f"Python's garbage collector paused it {fmt_ms(gc_own or 0)} a step against {fmt_ms(gc_ref or 0)} on "
                      f"the others: {fmt_ms(extra)} more a step, {min(extra / gap, 1):.0%} of the gap"]
    if extra_cores is not None and extra_cores >= MIN_EXTRA_CORES:
        return "host contention", [f"other processes used {r.other_cpu_cores:.1f} cores on its machine during its "
                                   f"window against {cores_ref:.1f} on the others'"]
    checked = [name for name, known in (("data wait", True), ("GC pauses", extra_gc is not None),
                                        ("other processes' CPU use", extra_cores is not None)) if known]
    listed = checked[0] if len(checked) == 1 else f"{', '.join(checked[:-1])} or {checked[-1]}"
    return "compute", [f"no difference in {listed} accounts for the gap: its own compute is slower "
                       "(a slower or throttled device, a larger shard, different work)"]


def _gc_per_step(r: RankMetrics) -> float | None:
    return r.gc_pause_s / r.steps if r.gc_pause_s is not None and r.steps else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


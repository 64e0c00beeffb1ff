"""The report's "Distributed" section: every rank, communication against compute, and the sharding memory table.

    dist = distributed_view(results, baseline=base, recommended=rec)   # None for a single-process run
    [r.step_time for r in dist.ranks], dist.communication, dist.sharding

Design notes: docs/report.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perfscope.report.charts import Chart, rank_step_chart
from perfscope.report.format import NA, Row, fmt_bytes, fmt_percent, fmt_rate, fmt_seconds
from perfscope.report.headline import memory_label
from perfscope.results import DistributedFacts, RankMetrics, Results, ShardingMemory, Trial
from perfscope.wording import words

CAUSES = {"gc": "garbage collection", "data": "data loading", "host contention": "host contention", "compute": "slow device or node",
          "unknown": "cause unknown"}


@dataclass(kw_only=True, slots=True)
class RankRow:
    rank: str
    node: str
    step_time: str  # wall / steps of its window
    samples_per_s: str
    data_wait: str
    compute_step: str  # its window without gradient sync
    peak_memory: str
    collective: str  # per step, from its trace
    exposed: str
    straggler: bool = False
    slowest: bool = False  # the rank that set the job's pace
    note: str = ""  # the straggler in words


@dataclass(kw_only=True, slots=True)
class CollectiveRow:
    op: str
    calls: str  # per step
    time: str  # per step
    payload: str  # per step
    bus: str  # achieved bus bandwidth
    microbench: str  # the same collective alone
    share: str  # achieved / micro-benchmark


@dataclass(kw_only=True, slots=True)
class ShardingRow:
    strategy: str
    parameters: str
    gradients: str
    optimizer_state: str
    total: str
    measured: str
    current: bool = False  # the strategy the run used


@dataclass(kw_only=True, slots=True)
class DistributedView:
    trial: str
    launch: list[Row]
    memory_label: str  # "Peak memory (allocator peak)" | "Peak memory (host RSS)"
    ranks: list[RankRow]
    stragglers: list[str]
    straggler_method: str
    communication: list[Row]
    communication_caption: str
    collectives: list[CollectiveRow]
    sharding: list[ShardingRow]
    chart: Chart | None
    notes: list[str] = field(default_factory=list)


def _facts_of(trial: Trial | None) -> DistributedFacts | None:
    return trial.metrics.distributed if trial is not None and trial.ok and trial.metrics is not None else None


def _stage(strategy: str) -> int:
    match = re.match(r"\s*ZeRO-(\d)", strategy)
    return int(match.group(1)) if match else 0


def _current_stage(trial: Trial, facts: DistributedFacts) -> int | None:
    """The memory model's row the run itself used (DDP 0, ZeRO-1, FSDP2 2 or 3); None when the user wrapped the model."""
    dp = facts.data_parallel
    if dp == "fsdp":
        return 3 if trial.config.reshard_after_forward else 2
    return {"ddp": 0, "zero1": 1}.get(dp)


def _ms(value: float | None) -> str:
    return fmt_seconds(value) if value is not None else "—"


def _rank_row(r: RankMetrics, facts: DistributedFacts) -> RankRow:
    straggler = next((s for s in facts.stragglers if s.rank == r.rank), None)
    note = ""
    if straggler is not None:
        note = (f"straggler: {straggler.slower_by * 100:.0f} % slower ({CAUSES.get(straggler.cause, straggler.cause)}), "
                f"slowest in {straggler.slowest_share * 100:.0f} % of the steps")
    return RankRow(
        rank=str(r.rank), node=r.node or "—", step_time=_ms(r.mean_step_time_s), samples_per_s=fmt_rate(r.samples_per_s, "samples/s"),
        data_wait=fmt_percent(r.data_wait_share), compute_step=_ms(r.mean_local_step_time_s),
        peak_memory=fmt_bytes(r.peak_memory_bytes) if r.peak_memory_bytes is not None else "—",
        collective=_ms(r.collective_s_per_step), exposed=_ms(r.exposed_collective_s_per_step),
        straggler=straggler is not None, slowest=r.rank == facts.slowest_rank, note=note,
    )


def _launch(facts: DistributedFacts, trial: Trial) -> list[Row]:
    numa = ""
    if facts.numa_nodes:
        numa = f"{facts.numa_nodes} node(s), " + (f"ranks bound ({facts.numa_binding})" if facts.numa_binding else "ranks not bound")
    rows = [
        Row(label="Ranks", value=f"{facts.world_size}" + ("" if "nnodes" in facts.unavailable else
                                                           f" ({facts.nnodes} node(s) × {facts.nproc_per_node} per node)")),
        Row(label="Backend", value=facts.backend),
        Row(label="Data parallel", value="" if "data_parallel" in facts.unavailable else
             facts.data_parallel + (" (the model's own wrapper)" if facts.data_parallel == "none" else "")),
        Row(label="Global batch", value=f"{facts.global_batch} (micro-batch × accumulation × ranks)" if facts.global_batch else ""),
        Row(label="Job throughput", value=(fmt_rate(facts.job_samples_per_s, "samples/s") + " (all ranks' samples / the slowest window)")
             if facts.job_samples_per_s is not None else ""),
        Row(label="Slowest rank", value=str(facts.slowest_rank) if facts.slowest_rank is not None else ""),
        Row(label="NUMA", value=numa),
    ]
    return [f for f in rows if f.value]


def _communication(facts: DistributedFacts) -> tuple[list[Row], str, list[CollectiveRow]]:
    comm = facts.communication
    if comm is None:
        return [], "", []
    share = comm.exposed_collective_s / comm.step_s if comm.step_s > 0 else None
    rows = [
        Row(label="Traced step", value=fmt_seconds(comm.step_s)),
        Row(label="Compute", value=fmt_seconds(comm.compute_s) + _share_of_step(comm.compute_s, comm.step_s)),
        Row(label="Collectives", value=fmt_seconds(comm.collective_s)),
        Row(label="Exposed collectives", value=fmt_seconds(comm.exposed_collective_s) + (f" ({share * 100:.0f} % of the step)" if share is not None else "")),
        Row(label="Overlap", value=fmt_percent(comm.overlap_share, 0) + " of the collective time hidden behind compute"
             if comm.overlap_share is not None else NA),
    ]
    caption = (f"Per step, from rank {comm.rank}'s profiled steps" + (f" ({comm.source})" if comm.source else "")
               + ": compute is the time some compute ran; exposed collective time had no compute beside it (what faster "
                 "communication would save). Bus bandwidth follows the NCCL-tests convention; the micro-benchmark runs the same "
                 "collective on the same group alone.")
    ops = []
    for c in comm.collectives:
        ratio = c.bus_gbps / c.microbench_bus_gbps if c.bus_gbps is not None and c.microbench_bus_gbps else None
        ops.append(CollectiveRow(
            op=c.op, calls=f"{c.calls_per_step:g}", time=fmt_seconds(c.time_s_per_step),
            payload=fmt_bytes(c.bytes_per_step) if c.bytes_per_step is not None else "—",
            bus=f"{c.bus_gbps:.1f} GB/s" if c.bus_gbps is not None else "—",
            microbench=(f"{c.microbench_bus_gbps:.1f} GB/s" + (f" at {fmt_bytes(c.microbench_bytes)}" if c.microbench_bytes else ""))
            if c.microbench_bus_gbps is not None else "—",
            share=fmt_percent(ratio, 0) if ratio is not None else "—",
        ))
    return rows, caption, ops


def _sharding(rows: list[ShardingMemory], current: int | None) -> list[ShardingRow]:
    return [ShardingRow(strategy=r.strategy, parameters=fmt_bytes(r.parameters), gradients=fmt_bytes(r.gradients),
                        optimizer_state=fmt_bytes(r.optimizer_state), total=fmt_bytes(r.total),
                        measured=(fmt_bytes(r.measured_total) + (f" ({r.measured_by})" if r.measured_by else "")) if r.measured_total is not None else "—",
                        current=_stage(r.strategy) == current)
            for r in sorted(rows, key=lambda r: _stage(r.strategy))]


def distributed_view(results: Results, *, baseline: Trial | None, recommended: Trial | None) -> DistributedView | None:
    """The section for the baseline's data-parallel facts (else the recommendation's); None for one process."""
    trial = next((t for t in (baseline, recommended) if _facts_of(t) is not None), None)
    facts = _facts_of(trial)
    if trial is None or facts is None:
        return None
    communication, caption, ops = _communication(facts)
    stragglers = [f"rank {s.rank}: {s.slower_by * 100:.0f} % slower than the others' median compute step, slowest in "
                  f"{s.slowest_share * 100:.0f} % of the steps ({CAUSES.get(s.cause, s.cause)})"
                  + (f" — {'; '.join(s.evidence)}" if s.evidence else "") for s in facts.stragglers]
    notes = [f"{k}: {words(v)}" for k, v in facts.unavailable.items()]
    if facts.communication is not None:
        notes += [words(n) for n in facts.communication.notes]
    return DistributedView(
        trial=trial.name, launch=_launch(facts, trial),
        memory_label=memory_label(results),
        ranks=[_rank_row(r, facts) for r in sorted(facts.ranks, key=lambda r: r.rank)],
        stragglers=stragglers, straggler_method=facts.straggler_method,
        communication=communication, communication_caption=caption, collectives=ops,
        sharding=_sharding(facts.memory_model, _current_stage(trial, facts)),
        chart=rank_step_chart(facts), notes=notes,
    )


def _share_of_step(seconds: float, step_s: float) -> str:
    """" (42 % of the step)"; past the step (the device work a step launched runs on after its host span: the GPU
    trails the host), said as that rather than as a share over 100 %."""
    if step_s <= 0:
        return ""
    if seconds > step_s * 1.005:
        return " (longer than the traced step: the device work it launched runs on after the host's step ends)"
    return f" ({seconds / step_s * 100:.0f} % of the step)"

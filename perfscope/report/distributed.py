"""The report's "Distributed" section: every rank, communication against compute, and the sharding memory table.

    dist = distributed_view(results, baseline=base, recommended=rec)   # None for a single-process run
    [r.step_time for r in dist.ranks], dist.communication, dist.sharding

Design notes: docs/report.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perfscope.report.charts import Chart, rank_step_chart
from perfscope.report.format import NA, Cell, Row, Table, fmt_bytes, fmt_percent, fmt_rate, fmt_seconds
from perfscope.report.headline import memory_label
from perfscope.results import DistributedFacts, Results, ShardingMemory, Trial
from perfscope.wording import words

CAUSES = {"gc": "garbage collection", "data": "data loading", "host contention": "host contention", "compute": "slow device or node",
          "unknown": "cause unknown"}


@dataclass(kw_only=True, slots=True)
class DistributedView:
    trial: str
    launch: list[Row]
    ranks: Table  # every rank: step, own compute step (its window without gradient sync), memory, collectives
    stragglers: list[str]
    straggler_method: str
    communication: list[Row]
    communication_caption: str
    collectives: Table  # per step, achieved bus bandwidth beside the same collective alone
    sharding: Table  # the training state per rank by strategy, the run's own marked
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


def _ranks(facts: DistributedFacts, results: Results) -> Table:
    table = Table(header=["Rank", "Node", "Step (wall / steps)", "Samples/s", "Data wait", "Own compute step",
                          memory_label(results), "Collectives / step", "Exposed / step"], align="llrrrrrrr")
    for r in sorted(facts.ranks, key=lambda r: r.rank):
        s = next((s for s in facts.stragglers if s.rank == r.rank), None)
        note = "" if s is None else (f"straggler: {s.slower_by * 100:.0f} % slower ({CAUSES.get(s.cause, s.cause)}), "
                                     f"slowest in {s.slowest_share * 100:.0f} % of the steps")
        tags = (["straggler"] if s else []) + (["slowest"] if r.rank == facts.slowest_rank else [])
        table.add(Cell(text=str(r.rank), tags=tags, note=note), Cell(text=r.node or "—", code=True),
                  _ms(r.mean_step_time_s), fmt_rate(r.samples_per_s, "samples/s"), fmt_percent(r.data_wait_share),
                  _ms(r.mean_local_step_time_s), fmt_bytes(r.peak_memory_bytes) if r.peak_memory_bytes is not None else "—",
                  _ms(r.collective_s_per_step), _ms(r.exposed_collective_s_per_step), mark="straggler" if s else "")
    return table


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


def _communication(facts: DistributedFacts) -> tuple[list[Row], str, Table]:
    ops = Table(header=["Collective", "Calls / step", "Time / step", "Payload / step", "Bus (achieved)", "Bus (micro-benchmark)",
                        "Of the link"], align="lrrrrrr")
    comm = facts.communication
    if comm is None:
        return [], "", ops
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
    for c in comm.collectives:
        ratio = c.bus_gbps / c.microbench_bus_gbps if c.bus_gbps is not None and c.microbench_bus_gbps else None
        ops.add(Cell(text=c.op, code=True), f"{c.calls_per_step:g}", fmt_seconds(c.time_s_per_step),
                fmt_bytes(c.bytes_per_step) if c.bytes_per_step is not None else "—",
                f"{c.bus_gbps:.1f} GB/s" if c.bus_gbps is not None else "—",
                (f"{c.microbench_bus_gbps:.1f} GB/s" + (f" at {fmt_bytes(c.microbench_bytes)}" if c.microbench_bytes else ""))
                if c.microbench_bus_gbps is not None else "—",
                fmt_percent(ratio, 0) if ratio is not None else "—")
    return rows, caption, ops


def _sharding(rows: list[ShardingMemory], current: int | None) -> Table:
    table = Table(header=["Strategy", "Parameters", "Gradients", "Optimizer state", "Total (model)", "Measured"], align="lrrrrr")
    for r in sorted(rows, key=lambda r: _stage(r.strategy)):
        this = _stage(r.strategy) == current
        measured = fmt_bytes(r.measured_total) + (f" ({r.measured_by})" if r.measured_by else "") if r.measured_total is not None else "—"
        table.add(Cell(text=r.strategy, tags=["this run"] if this else []), fmt_bytes(r.parameters), fmt_bytes(r.gradients),
                  fmt_bytes(r.optimizer_state), fmt_bytes(r.total), measured, mark="role-baseline" if this else "")
    return table


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
        trial=trial.name, launch=_launch(facts, trial), ranks=_ranks(facts, results),
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

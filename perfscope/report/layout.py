"""The report's "Layouts" section: the layout search's table (layout, memory per rank, throughput, communication,
bubble), the pruned layouts with their reasons, and each pipeline run's bubble against the formula.

    view = layout_view(results)          # None when no layout search ran (one process, or --skip of both knobs)

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.report.format import NA, fmt_bytes, fmt_percent, fmt_rate, fmt_seconds
from perfscope.results import LayoutRow, Results
from perfscope.wording import words


@dataclass(kw_only=True, slots=True)
class LayoutLine:
    rank: str  # 1, 2, ... by measured throughput per rank; "" when not measured
    layout: str
    status: str
    micro_batches: str  # "16" or "4 × 4"
    memory_model: str  # modelled state per rank
    memory_measured: str  # the largest rank's state counted from its tensors
    throughput: str  # the job's samples/s
    per_rank: str  # samples/s per rank
    communication: str  # collectives / step (exposed)
    bubble: str  # measured (formula)
    reason: str
    trial: str
    best: bool = False


@dataclass(kw_only=True, slots=True)
class LayoutView:
    world_size: int
    measured: list[LayoutLine] = field(default_factory=list)
    pruned: list[LayoutLine] = field(default_factory=list)
    memory_limit: str = NA
    method: str = ""
    pipelines: list[str] = field(default_factory=list)  # each pipeline run's bubble: measured, replayed, formula
    notes: list[str] = field(default_factory=list)


def _reason(row: LayoutRow) -> str:
    """"would not fit: 40.0 GiB of training state per rank, ...": the pruning's category, then its reason."""
    said = words(row.reason) if row.reason is not None else ""
    return f"{row.prune_reason}: {said}" if row.prune_reason else said


def _line(row: LayoutRow, rank: int | None) -> LayoutLine:
    comm = NA
    if row.collective_s_per_step is not None:
        comm = fmt_seconds(row.collective_s_per_step)
        if row.exposed_collective_s_per_step is not None:
            comm += f" ({fmt_seconds(row.exposed_collective_s_per_step)} exposed)"
    bubble = "—" if row.pipeline_parallel == 1 else (
        (fmt_percent(row.bubble, 0) if row.bubble is not None else NA)
        + (f" (formula {fmt_percent(row.bubble_formula, 0)})" if row.bubble_formula is not None else ""))
    micro = (f"{row.microbatches} × {row.micro_batch_size}" if row.pipeline_parallel > 1
             else f"{row.micro_batch_size}" + (f" × {row.microbatches} accum" if row.microbatches > 1 else ""))
    return LayoutLine(
        rank=str(rank) if rank else "", layout=row.layout, status=row.status, micro_batches=micro,
        memory_model=fmt_bytes(row.memory_per_rank_bytes), memory_measured=fmt_bytes(row.measured_state_bytes),
        throughput=fmt_rate(row.samples_per_s, "samples/s"), per_rank=fmt_rate(row.samples_per_s_per_rank, "samples/s"),
        communication=comm, bubble=bubble,
        reason=_reason(row),
        trial=row.configuration or "", best=rank == 1,
    )


def layout_view(results: Results) -> LayoutView | None:
    table = results.layouts
    if table is None or not table.rows:
        return None
    ranked = table.measured()
    order = {id(r): i + 1 for i, r in enumerate(ranked)}
    view = LayoutView(world_size=table.world_size, memory_limit=fmt_bytes(table.memory_limit_bytes), method=table.method,
                      notes=[words(n) for n in table.notes])
    for row in table.rows:
        line = _line(row, order.get(id(row)))
        (view.measured if row.status in ("measured", "failed") else view.pruned).append(line)
    view.measured.sort(key=lambda x: (x.rank == "", int(x.rank) if x.rank else 0))
    seen = set()
    for trial in results.ok_trials():
        facts = trial.metrics.distributed.parallel if trial.metrics and trial.metrics.distributed else None
        if facts is None or facts.bubble_formula is None or trial.configuration in seen:
            continue
        seen.add(trial.configuration)
        replay = f", {fmt_percent(facts.bubble_replayed, 0)} replayed from the stages' own compute (load-immune)" if facts.bubble_replayed is not None else ""
        measured = fmt_percent(facts.bubble_measured, 0) if facts.bubble_measured is not None else NA
        view.pipelines.append(f"{trial.configuration}: {facts.pipeline_parallel} stages, {facts.microbatches} micro-batches "
                              f"({facts.schedule}): bubble {measured} measured (wall clock){replay}; "
                              f"(p − 1) / (m + p − 1) = {fmt_percent(facts.bubble_formula, 0)}")
    return view

"""The report's "Layouts" section: the layout search's table (layout, memory per rank, throughput, communication,
bubble), the pruned layouts with their reasons, and each pipeline run's bubble against the formula.

    view = layout_view(results)          # None when no layout search ran (one process, or --skip of both knobs)

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.report.format import NA, Cell, Table, fmt_bytes, fmt_percent, fmt_rate, fmt_seconds
from perfscope.results import LayoutRow, Results
from perfscope.wording import words


@dataclass(kw_only=True, slots=True)
class LayoutView:
    world_size: int
    measured: Table  # ranked by measured throughput per rank, the best marked; failed ones last
    pruned: Table  # not measured, each with why
    memory_limit: str = NA
    method: str = ""
    pipelines: list[str] = field(default_factory=list)  # each pipeline run's bubble: measured, replayed, formula
    notes: list[str] = field(default_factory=list)


def _micro_batches(row: LayoutRow) -> str:
    """"4 × 4" (pipeline micro-batches × size), or "16" ("16 × 2 accum")."""
    if row.pipeline_parallel > 1:
        return f"{row.microbatches} × {row.micro_batch_size}"
    return f"{row.micro_batch_size}" + (f" × {row.microbatches} accum" if row.microbatches > 1 else "")


def _measured(row: LayoutRow, rank: int | None) -> list[str | Cell]:
    comm = NA
    if row.collective_s_per_step is not None:
        comm = fmt_seconds(row.collective_s_per_step)
        if row.exposed_collective_s_per_step is not None:
            comm += f" ({fmt_seconds(row.exposed_collective_s_per_step)} exposed)"
    bubble = "—" if row.pipeline_parallel == 1 else (
        (fmt_percent(row.bubble, 0) if row.bubble is not None else NA)
        + (f" (formula {fmt_percent(row.bubble_formula, 0)})" if row.bubble_formula is not None else ""))
    return [str(rank) if rank else "—", Cell(text=row.layout, tags=["best"] if rank == 1 else [], note=_reason(row)),
            _micro_batches(row), fmt_bytes(row.memory_per_rank_bytes), fmt_bytes(row.measured_state_bytes),
            fmt_rate(row.samples_per_s, "samples/s"), fmt_rate(row.samples_per_s_per_rank, "samples/s"), comm, bubble,
            Cell(text=row.configuration or "", code=bool(row.configuration))]


def _reason(row: LayoutRow) -> str:
    return f"{row.prune_reason}: {row.reason}" if row.prune_reason else row.reason or ""


def layout_view(results: Results) -> LayoutView | None:
    table = results.layouts
    if table is None or not table.rows:
        return None
    view = LayoutView(world_size=table.world_size, memory_limit=fmt_bytes(table.memory_limit_bytes), method=table.method,
                      notes=[words(n) for n in table.notes],
                      measured=Table(header=["#", "Layout", "Micro-batches", "State / rank (model)", "State / rank (measured)",
                                             "Samples/s", "Per rank", "Collectives / step", "Bubble", "Trial"], align="rlrrrrrrrl"),
                      pruned=Table(header=["Layout", "Micro-batches", "State / rank (model)", "Why"], align="lrrl"))
    order = {id(r): i + 1 for i, r in enumerate(table.measured())}
    shown = [r for r in table.rows if r.status in ("measured", "failed")]
    for row in sorted(shown, key=lambda r: order.get(id(r), len(order) + 1)):  # unranked (failed) last, in their order
        view.measured.add(*_measured(row, order.get(id(row))), mark="best" if order.get(id(row)) == 1 else "")
    for row in (r for r in table.rows if r.status not in ("measured", "failed")):
        view.pruned.add(row.layout, _micro_batches(row), fmt_bytes(row.memory_per_rank_bytes), _reason(row))
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

"""Pipeline parallelism (`torch.distributed.pipelining`): each rank runs a contiguous share of the blocks.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason
from perfscope.results import Trial
from perfscope.results.layout import bubble_formula

MICROBATCHES_PER_STAGE = 2
"""m = 2 × p micro-batches: a bubble of (p − 1) / (3p − 1), 1/5 at p = 2, without shrinking each micro-batch much."""


def pp_reason(ctx: KnobContext, pp: int) -> str | None:
    """Why a pipeline of ``pp`` stages cannot be tried on this model and launch, or None."""
    reason = data_parallel_reason(ctx)
    if reason is not None:
        return reason
    layout = ctx.model.layout
    if layout is None or layout.blocks == 0:
        return "no repeated blocks (an nn.ModuleList of same-type layers) to split into stages"
    if layout.blocks % pp:
        return f"{layout.blocks} layers are not divisible by pp = {pp}: the stages would be unequal"
    if ctx.base.activation_checkpointing or ctx.base.compile is not None or ctx.workload.precision == "fp16":
        return "pipeline trials run without activation checkpointing, torch.compile and the fp16 GradScaler"
    return None


def microbatches(ctx: KnobContext, pp: int) -> tuple[int, int] | None:
    """(micro-batch size, m) keeping the global batch: the most micro-batches up to 2 × pp that divide it."""
    total = ctx.base.global_batch
    for m in range(MICROBATCHES_PER_STAGE * pp, 0, -1):
        if total % m == 0:
            return total // m, m
    return None


class PipelineParallel(Knob):
    id = "pipeline_parallel"
    fields = ("pipeline_parallel", "pipeline_schedule")
    title = "pipeline parallelism (torch.distributed.pipelining: one stage per rank, GPipe / 1F1B)"
    reference = "https://pytorch.org/docs/stable/distributed.pipelining.html"
    cost = "the pipeline bubble"
    traced = True  # the point-to-point traffic between stages, from the trace

    def code_change(self, ctx: KnobContext) -> str | None:
        pp = ctx.base.world_size
        split = microbatches(ctx, pp)
        mb, m = split if split else (ctx.base.micro_batch_size, pp)
        return "\n".join([
            "+from torch.distributed.pipelining import ScheduleGPipe, SplitPoint, pipeline",
            f"+pipe = pipeline(model, mb_args=(example_micro_batch,), split_spec={{\"blocks.{{i}}\": SplitPoint.BEGINNING, ...}})  # {pp} stages",
            "+stage = pipe.build_stage(rank, device)",
            f"+schedule = ScheduleGPipe(stage, n_microbatches={m}, loss_fn=loss_fn)   # or Schedule1F1B: less activation memory",
            "-model = DistributedDataParallel(model)",
            "-loss = loss_fn(model(x), y); loss.backward()",
            f"+schedule.step(x, target=y) if rank == 0 else schedule.step(target=y)   # x: {mb * m} samples = {m} micro-batches of {mb}",
        ])

    def applies(self, ctx: KnobContext) -> str | None:
        reason = pp_reason(ctx, ctx.base.world_size)
        if reason is None and microbatches(ctx, ctx.base.world_size) is None:
            return f"the global batch {ctx.base.global_batch} cannot be split into micro-batches"
        return reason

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        pp = ctx.base.world_size
        mb, m = microbatches(ctx, pp) or (ctx.base.micro_batch_size, 1)
        common = {"data_parallel": "none", "pipeline_parallel": pp, "no_sync": False, "micro_batch_size": mb,
                  "grad_accum_steps": m}
        out = [{**common, "pipeline_schedule": "gpipe"}, {**common, "pipeline_schedule": "1f1b"}]
        blocks = ctx.model.layout.blocks if ctx.model.layout else 0
        if blocks % (2 * pp) == 0 and m % pp == 0:  # two equal stages per rank
            out.append({**common, "pipeline_schedule": "interleaved_1f1b"})
        return out

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        facts = trial.metrics.distributed.parallel if trial.metrics and trial.metrics.distributed else None
        if facts is None or facts.bubble_formula is None:
            return []
        notes = [f"{facts.schedule}, {facts.microbatches} micro-batches of {trial.config.micro_batch_size}: bubble "
                 + (f"{facts.bubble_measured:.0%} measured (wall clock)" if facts.bubble_measured is not None else "unmeasured")
                 + (f", {facts.bubble_replayed:.0%} replayed from the stages' compute" if facts.bubble_replayed is not None else "")
                 + f", {facts.bubble_formula:.0%} by (p − 1) / (m + p − 1)"]
        if facts.microbatches and facts.pipeline_parallel:
            more = 4 * facts.pipeline_parallel
            notes.append(f"{more} micro-batches would bring the formula to "
                         f"{bubble_formula(facts.pipeline_parallel, more):.0%}")
        return notes

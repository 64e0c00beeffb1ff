"""Gradient accumulation without a gradient sync on every micro-batch (DDP `no_sync()`, FSDP2
`set_requires_gradient_sync(False)`): one all-reduce per optimizer step instead of one per micro-batch.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason
from perfscope.knobs.micro_batch import global_batch_notes
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message

ACCUMULATION = (2, 4)


class NoSyncAccumulation(Knob):
    id = "no_sync_accumulation"
    title = "accumulation with one gradient sync per step (DDP no_sync)"
    reference = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync"
    fields = ("no_sync",)
    addresses = ("communication",)

    def code_change(self, ctx: KnobContext) -> str | None:
        if ctx.base.data_parallel == "fsdp":
            skip = ["+    model.set_requires_gradient_sync(last)   # reduce-scatter only on the last micro-batch",
                    "     loss = loss_fn(model, batch) / ACCUM",
                    "     loss.backward()"]
        else:
            skip = ["+    with nullcontext() if last else model.no_sync():   # all-reduce only on the last micro-batch",
                    "-    loss = loss_fn(model, batch) / ACCUM",
                    "-    loss.backward()",
                    "+        loss = loss_fn(model, batch) / ACCUM",
                    "+        loss.backward()"]
        head = [] if ctx.base.data_parallel == "fsdp" else ["+from contextlib import nullcontext"]
        accum = [] if ctx.base.grad_accum_steps > 1 else [
            "+ACCUM = 2   # or 4: the global batch (micro-batch × ACCUM × ranks) grows as much (see caveats)"]
        return "\n".join([*head, *accum, " for i, batch in enumerate(loader):",
                          "+    last = (i + 1) % ACCUM == 0", *skip,
                          "     if (i + 1) % ACCUM == 0:", "         optimizer.step()", "         optimizer.zero_grad()"])

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.no_sync or ctx.workload.no_sync:
            return "the loop already skips the gradient sync on all micro-batches but the last"
        return data_parallel_reason(ctx)

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        if ctx.base.grad_accum_steps > 1:
            return [{"no_sync": True}]  # the same global batch, fewer syncs
        return [{"grad_accum_steps": accum, "no_sync": True} for accum in ACCUMULATION]

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return global_batch_notes(ctx.base, config)

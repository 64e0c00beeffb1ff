"""Gradient communication compression: DDP communication hooks that all-reduce smaller gradients.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import DdpOption, KnobContext, ddp_reason
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import ddp_wrap

HOOKS = {"bf16": "bf16_compress_hook", "fp16": "fp16_compress_hook"}


class GradCompression(DdpOption):
    id = "grad_compression"
    title = "gradient communication compression (DDP bf16 / fp16 hooks)"
    reference = "https://pytorch.org/docs/stable/ddp_comm_hooks.html"
    fields = ("comm_hook",)
    addresses = ("communication",)

    def code_change(self, ctx: KnobContext) -> str | None:
        hook = HOOKS["bf16" if ctx.cuda else "fp16"]
        return ("+from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                f" {ddp_wrap(ctx.device)}\n"
                f"+model.register_comm_hook(None, default_hooks.{hook})   # gradients cross the wire in half precision")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.comm_hook is not None:
            return f"the DDP model already has a communication hook ({ctx.base.comm_hook})"
        return ddp_reason(ctx, "a communication hook")

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"comm_hook": hook} for hook in (("bf16", "fp16") if ctx.cuda else ("fp16",))]

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        if config.comm_hook is None:
            return []
        return [msg("numerics", change=msg("compressed_gradients", hook=config.comm_hook))]

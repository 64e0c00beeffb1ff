"""Activation checkpointing: drop the repeated blocks' activations and recompute them in backward.

It costs about one extra forward (≈ 33% more FLOPs: HFU rises, MFU falls) and buys memory; its value is
the larger micro-batch that memory allows, so the sweep also measures it paired with a micro-batch search.
"""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext


class ActivationCheckpointing(Knob):
    id = "activation_checkpointing"
    title = "activation checkpointing of repeated blocks"
    reference = "https://pytorch.org/docs/stable/checkpoint.html"
    code_change = (
        "+from torch.utils.checkpoint import checkpoint\n"
        "     for block in self.blocks:\n"
        "-        x = block(x)\n"
        "+        x = checkpoint(block, x, use_reentrant=False)"
    )

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.activation_checkpointing:
            return "activation checkpointing is already on"
        if ctx.model.repeated_blocks < 2:
            return "no repeated blocks found (an nn.ModuleList of same-type blocks); set Workload.checkpoint_blocks"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"activation_checkpointing": True}]

"""Activation checkpointing: drop the repeated blocks' activations and recompute them in backward.

It costs about one extra forward (≈ 33% more FLOPs: HFU rises, MFU falls) and buys memory; its value is
the larger micro-batch that memory allows, so the sweep also measures it paired with a micro-batch search.
"""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext
from perfscope.snippets import checkpoint_change


class ActivationCheckpointing(Knob):
    id = "activation_checkpointing"
    title = "activation checkpointing of repeated blocks"
    reference = "https://pytorch.org/docs/stable/checkpoint.html"
    frees = "activations"
    cost = "recompute"

    def code_change(self, ctx: KnobContext) -> str | None:
        return checkpoint_change()

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.activation_checkpointing:
            return "activation checkpointing is already on"
        if ctx.model.repeated_blocks < 2:
            return "no repeated blocks found (an nn.ModuleList of same-type blocks); set Workload.checkpoint_blocks"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"activation_checkpointing": True}]

"""Activation checkpointing: drop the repeated blocks' activations and recompute them in backward.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.snippets import checkpoint_change
from perfscope.workload import Workload


class ActivationCheckpointing(Knob):
    id = "activation_checkpointing"
    title = "activation checkpointing of repeated blocks"
    reference = "https://pytorch.org/docs/stable/checkpoint.html"
    fields = ("activation_checkpointing",)
    value = True
    observed_by_hooks = False
    frees = "activations"
    cost = "recompute"
    gap_parts = ("recompute",)  # the FLOPs done again (HFU − MFU): no slice of the step holds them

    def code_change(self, ctx: KnobContext) -> str | None:
        return checkpoint_change()

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.activation_checkpointing:
            return "activation checkpointing is already on"
        if ctx.model.repeated_blocks < 2:
            return "no repeated blocks found (an nn.ModuleList of same-type blocks); set Workload.checkpoint_blocks"
        return None

    def config_words(self, config: TrialConfig) -> str | None:
        return "activation checkpointing" if config.activation_checkpointing else None

    def apply_to_model(self, model: Any, config: TrialConfig, workload: Workload) -> Any:
        from perfscope.knobs.apply.checkpointing import apply_checkpointing

        if not apply_checkpointing(model, workload.checkpoint_blocks):
            raise ValueError("activation checkpointing: no repeated blocks found (set Workload.checkpoint_blocks)")
        return model

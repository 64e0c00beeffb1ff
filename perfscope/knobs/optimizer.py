"""Fused optimizer step: one kernel (or a few) for all parameters instead of several per parameter."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig

FUSABLE = {"Adam", "AdamW", "SGD", "Adagrad"}


class FusedOptimizer(Knob):
    id = "fused_optimizer"
    title = "fused optimizer (fused=True)"
    reference = "https://pytorch.org/docs/stable/optim.html#algorithms"
    fields = ("optimizer_impl",)
    value = "fused"
    addresses = ("optimizer",)
    observed_by_hooks = False

    def code_change(self, ctx: KnobContext) -> str | None:
        return "-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n+optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)"

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.optimizer_impl == "fused":
            return "the optimizer is already fused"
        if ctx.model.optimizer_class not in FUSABLE:
            return f"{ctx.model.optimizer_class} has no fused implementation in torch (fusable: {', '.join(sorted(FUSABLE))})"
        return None

    def config_words(self, config: TrialConfig) -> str | None:
        return f"{config.optimizer_impl} optimizer" if config.optimizer_impl != "default" else None
    # Applied where the optimizer is built (perfscope.trial.step rebuilds the user's with fused=True).

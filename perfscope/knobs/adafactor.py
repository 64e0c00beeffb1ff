"""Adafactor (torch.optim.Adafactor, torch >= 2.5) in place of Adam/AdamW: factored second moment, no first.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import KnobContext
from perfscope.knobs.lean_optimizer import LeanOptimizer
from perfscope.results.messages import Message, msg
from perfscope.versions import major_minor

MIN_TORCH = (2, 5)


class Adafactor(LeanOptimizer):
    id = "adafactor"
    title = "Adafactor instead of Adam/AdamW (factored optimizer state)"
    reference = "https://pytorch.org/docs/stable/generated/torch.optim.Adafactor.html"
    replacement = "Adafactor"
    value = "adafactor"  # built by perfscope.trial.step
    shares_field = True

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
                "+optimizer = torch.optim.Adafactor(model.parameters(), lr=lr)   # lr caps a relative step here: re-tune it")

    def applies(self, ctx: KnobContext) -> str | None:
        version = major_minor(ctx.environment.torch_version)
        if version is not None and version < MIN_TORCH:
            return f"torch.optim.Adafactor needs torch ≥ 2.5 (this run: {ctx.environment.torch_version})"
        return self.not_adam_type(ctx)

    def recipe_caveat(self, ctx: KnobContext) -> Message:
        return msg("adafactor_recipe", adam_decay=ctx.model.optimizer_class == "Adam")

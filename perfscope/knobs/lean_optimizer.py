"""What the memory-lean optimizer knobs (adafactor, adamw_8bit) share: they replace the user's optimizer.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext, freed, size
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg

ADAM_TYPES = ("Adam", "AdamW")
"""The optimizers these knobs stand in for: adaptive, with per-parameter moments, whose lr is the nearest given
value for the replacement's."""


class LeanOptimizer(Knob):
    """Base of the knobs that replace an Adam-type optimizer with one that keeps less state."""

    fields = ("optimizer",)
    frees = "optimizer state"
    changes_recipe = True
    replacement: str = ""
    """The optimizer in words, for reasons and caveats ("Adafactor")."""

    def not_adam_type(self, ctx: KnobContext) -> str | None:
        if ctx.base.optimizer != "user":
            return f"the optimizer is already replaced ({ctx.base.optimizer})"
        if ctx.model.optimizer_class not in ADAM_TYPES:
            return (f"{self.replacement} stands in for Adam/AdamW (adaptive, two moments per parameter); the workload's "
                    f"optimizer is {ctx.model.optimizer_class}, whose learning rate and behaviour do not transfer")
        return None

    def recipe_caveat(self, ctx: KnobContext) -> Message:
        raise NotImplementedError

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("training_recipe", optimizer=ctx.model.optimizer_class, replacement=self.replacement,
                    caveat=self.recipe_caveat(ctx))]

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        notes = []
        before, after = _state_bytes(baseline), _state_bytes(trial)
        if before is not None and after is not None:
            notes.append(f"optimizer state {freed(before, after)}")
        bm, tm = baseline.metrics, trial.metrics
        if (ctx.cuda and bm is not None and tm is not None and bm.peak_memory_bytes and tm.peak_memory_bytes
                and bm.micro_batch_size == tm.micro_batch_size):
            notes.append(f"peak memory {size(bm.peak_memory_bytes)} → {size(tm.peak_memory_bytes)} at micro-batch {tm.micro_batch_size}")
        if tm is not None and tm.optimizer:
            notes.append(f"stepped {tm.optimizer}")
        return notes


def _state_bytes(trial: Trial) -> int | None:
    m = trial.metrics
    return m.memory_breakdown.optimizer_state if m is not None and m.memory_breakdown is not None else None

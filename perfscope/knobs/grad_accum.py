"""Gradient accumulation traded for micro-batch: a larger micro-batch with fewer accumulation steps, the
user's global batch (micro × accumulation) unchanged — the semantics-preserving side of the micro-batch search.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig


class GradAccum(Knob):
    id = "grad_accum"
    title = "larger micro-batch, fewer accumulation steps (same global batch)"
    search = "micro_batch"
    keeps_global_batch = True
    reference = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
    fields = ("micro_batch_size", "grad_accum_steps")
    addresses = ("step",)

    def code_change(self, ctx: KnobContext) -> str | None:
        return (
            "-loader = DataLoader(ds, batch_size=MICRO)       # e.g. 8, accumulated ACCUM=4 times\n"
            "+loader = DataLoader(ds, batch_size=2 * MICRO)   # 16 ...\n"
            "-ACCUM = 4\n"
            "+ACCUM = 2                                       # ... accumulated 2 times: the same 32 samples per step\n"
            " loss = loss_fn(model, batch) / ACCUM            # the loss is still divided by ACCUM"
        )

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.grad_accum_steps < 2:
            return ("the loop does not accumulate gradients (grad_accum_steps=1): a larger micro-batch would change "
                    "the global batch (see micro_batch)")
        return None

    def active(self, config: TrialConfig) -> bool:
        return False  # the loop's accumulation loop applies it (see micro_batch)

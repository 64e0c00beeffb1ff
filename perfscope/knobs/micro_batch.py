"""Micro-batch size: larger micro-batches fill the device better, until memory runs out.

Searched, not toggled (perfscope.microbatch): doubling until OOM or no more gain, then bisection.
Gradient accumulation keeps the user's global batch (micro × accumulation) constant, so a recommended
change preserves training semantics; a change of the global batch is flagged with a learning-rate note.
"""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.trial.config import TrialConfig


class MicroBatch(Knob):
    id = "micro_batch"
    title = "micro-batch size (with gradient accumulation)"
    search = True
    reference = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
    code_change = (
        "-loader = DataLoader(ds, batch_size=8)\n"
        "+loader = DataLoader(ds, batch_size=MICRO)            # larger micro-batch\n"
        "+ACCUM = GLOBAL_BATCH // MICRO                          # keep the global batch\n"
        "+loss = loss_fn(model, batch) / ACCUM\n"
        "+loss.backward()\n"
        "+if (i + 1) % ACCUM == 0:\n"
        "+    optimizer.step(); optimizer.zero_grad(set_to_none=True)"
    )

    def semantics(self, ctx: KnobContext, config: TrialConfig) -> list[str]:
        before, after = ctx.base.samples_per_step, config.samples_per_step
        if before == after:
            return []
        factor = after / before
        return [
            f"global batch {before} → {after}: scale the learning rate (linear ×{factor:g}, or √ ×{factor ** 0.5:.2f}) "
            "and re-tune warm-up; steps per epoch change"
        ]

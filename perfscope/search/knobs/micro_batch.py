"""Micro-batch size: larger micro-batches fill the device better, until memory runs out.

Searched, not toggled (perfscope.search.microbatch): doubling until OOM or no more gain, then bisection.
This knob reports the fastest micro-batch overall; when it changes the global batch (micro × accumulation)
that is flagged with a learning-rate note and never recommended. Its semantics-preserving side — the same
global batch through accumulation — is the `grad_accum` knob.
"""

from __future__ import annotations

from perfscope.results.config import TrialConfig
from perfscope.search.knobs.base import Knob, KnobContext


class MicroBatch(Knob):
    id = "micro_batch"
    title = "micro-batch size (throughput vs micro-batch)"
    search = True
    reference = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("-loader = DataLoader(ds, batch_size=B)\n"
                "+loader = DataLoader(ds, batch_size=MICRO)   # a different global batch: scale the learning rate (see caveats)")

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[str]:
        before, after = ctx.base.samples_per_step, config.samples_per_step
        if before == after:
            return []
        return [global_batch_note(before, after)]


def global_batch_note(before: int, after: int) -> str:
    """The learning-rate note every global-batch change carries (linear: Goyal et al. 2017; √: Krizhevsky 2014,
    the usual rule for Adam-type optimizers)."""
    factor = after / before
    return (
        f"global batch {before} → {after}: scale the learning rate (linear ×{factor:g} for SGD, or √ ×{factor ** 0.5:.2f} "
        "for Adam-type optimizers) and re-tune warm-up; steps per epoch change"
    )

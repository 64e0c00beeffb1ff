"""Micro-batch size: larger micro-batches fill the device better, until memory runs out. Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig


class MicroBatch(Knob):
    id = "micro_batch"
    title = "micro-batch size (throughput vs micro-batch)"
    search = "micro_batch"
    reference = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
    fields = ("micro_batch_size", "grad_accum_steps")
    addresses = ("step",)
    gap_parts = ("idle", "gemm")  # larger GEMMs run nearer their peak, fewer launches leave the device idle

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("-loader = DataLoader(ds, batch_size=B)\n"
                "+loader = DataLoader(ds, batch_size=MICRO)   # a different global batch: scale the learning rate (see caveats)")

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[str]:
        if config.global_batch == ctx.base.global_batch:
            return []
        return [global_batch_note(ctx.base, config)]

    def config_words(self, config: TrialConfig) -> str | None:
        return f"micro-batch {config.micro_batch_size} × accumulation {config.grad_accum_steps}"

    def active(self, config: TrialConfig) -> bool:
        return False  # every trial has a micro-batch: the loader's batch size and the step's accumulation loop apply it


def global_batch_note(before: TrialConfig, after: TrialConfig) -> str:
    """The learning-rate note every global-batch change carries (linear: Goyal et al. 2017; √: Krizhevsky 2014,
    the usual rule for Adam-type optimizers). In a distributed run the global batch is micro-batch × accumulation
    × data-parallel ranks, spelled out: every rank's accumulated micro-batches make one optimizer step."""
    factor = after.global_batch / before.global_batch
    how = ""
    if before.distributed or after.distributed:
        def parts(c: TrialConfig) -> str:
            return f"{c.micro_batch_size} × {c.grad_accum_steps} × {c.world_size}"
        how = f" (micro-batch × accumulation × ranks: {parts(before)} → {parts(after)})"
    return (
        f"global batch {before.global_batch} → {after.global_batch}{how}: scale the learning rate (linear ×{factor:g} "
        f"for SGD, or √ ×{factor ** 0.5:.2f} for Adam-type optimizers) and re-tune warm-up; steps per epoch change"
    )

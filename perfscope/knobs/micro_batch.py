"""Micro-batch size: larger micro-batches fill the device better, until memory runs out. Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg


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

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return global_batch_notes(ctx.base, config)

    def config_words(self, config: TrialConfig) -> str | None:
        return f"micro-batch {config.micro_batch_size} × accumulation {config.grad_accum_steps}"

    def active(self, config: TrialConfig) -> bool:
        return False  # every trial has a micro-batch: the loader's batch size and the step's accumulation loop apply it


def global_batch_notes(before: TrialConfig, after: TrialConfig) -> list[Message]:
    """The learning-rate note every global-batch change carries (linear: Goyal et al. 2017; √: Krizhevsky 2014,
    the usual rule for Adam-type optimizers); none when it did not change. In a distributed run the global batch is
    micro-batch × accumulation × data-parallel ranks, spelled out: every rank's accumulated micro-batches make one
    optimizer step."""
    if after.global_batch == before.global_batch:
        return []
    if not (before.distributed or after.distributed):
        return [msg("global_batch", before=before.global_batch, after=after.global_batch)]

    def parts(c: TrialConfig) -> str:
        return f"{c.micro_batch_size} × {c.grad_accum_steps} × {c.world_size}"
    return [msg("global_batch", before=before.global_batch, after=after.global_batch, parts_before=parts(before),
                parts_after=parts(after))]

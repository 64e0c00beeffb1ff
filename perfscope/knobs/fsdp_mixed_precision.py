"""FSDP2 mixed precision (`MixedPrecisionPolicy`): parameters all-gathered and gradients reduce-scattered in bf16.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg


class FsdpMixedPrecision(Knob):
    id = "fsdp_mixed_precision"
    title = "FSDP2 mixed precision (bf16 all-gather and reduce-scatter)"
    reference = "https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html#torch.distributed.fsdp.MixedPrecisionPolicy"
    fields = ("fsdp_mixed_precision",)
    value = "bf16"
    builds_on = "fsdp2"

    def prerequisite_met(self, config: TrialConfig) -> bool:
        return config.data_parallel == "fsdp"

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("+from torch.distributed.fsdp import MixedPrecisionPolicy\n"
                "+mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)\n"
                " for block in model.blocks:\n"
                "-    fully_shard(block)\n"
                "+    fully_shard(block, mp_policy=mp)\n"
                "-fully_shard(model)\n"
                "+fully_shard(model, mp_policy=mp)   # the shards and the optimizer step stay fp32")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.fsdp_mixed_precision is not None:
            return f"the FSDP model already gathers and reduces in {ctx.base.fsdp_mixed_precision}"
        if ctx.cuda and (ctx.capability or (0, 0)) < (8, 0):
            return f"bf16 compute needs compute capability ≥ 8.0 (this device: {ctx.environment.compute_capability})"
        return data_parallel_reason(ctx)

    def compatible(self, config: TrialConfig) -> bool:
        return config.data_parallel == "fsdp"

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        if config.fsdp_mixed_precision is None:
            return []
        return [msg("numerics", change=msg("low_precision_params", dtype=config.fsdp_mixed_precision))]

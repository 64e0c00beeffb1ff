"""ZeRO-1: DDP with `ZeroRedundancyOptimizer`, each rank keeping and stepping 1/N of the optimizer state.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason
from perfscope.knobs.fsdp2 import state_per_rank_notes
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.snippets import ddp_wrap


class Zero1(Knob):
    id = "zero1"
    title = "ZeroRedundancyOptimizer (≈ ZeRO-1: optimizer state sharded)"
    reference = "https://pytorch.org/docs/stable/distributed.optim.html#torch.distributed.optim.ZeroRedundancyOptimizer"
    fields = ("data_parallel",)
    value = "zero1"  # applied by perfscope.trial.data_parallel (shard_optimizer)
    shares_field = True
    frees = "optimizer state"
    cost = "a parameter broadcast per step"

    def code_change(self, ctx: KnobContext) -> str | None:
        optimizer = f"torch.optim.{ctx.model.optimizer_class or 'AdamW'}"
        return (f" {ddp_wrap(ctx.device)}\n"
                "+from torch.distributed.optim import ZeroRedundancyOptimizer\n"
                f"-optimizer = {optimizer}(model.parameters(), lr=lr)\n"
                f"+optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class={optimizer}, lr=lr)   # 1/N of the state per rank\n"
                "+# checkpoints: optimizer.consolidate_state_dict(to=0) on every rank, then optimizer.state_dict() on rank 0")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.data_parallel == "zero1":
            return "the loop already shards the optimizer state (ZeroRedundancyOptimizer)"
        if ctx.base.data_parallel == "fsdp":
            return "FSDP already shards the optimizer state (and the gradients and parameters with it)"
        return data_parallel_reason(ctx)

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        return state_per_rank_notes(baseline, trial)

    def compatible(self, config: TrialConfig) -> bool:
        return config.data_parallel != "fsdp"  # FSDP2 already shards the state; its settings would not apply to DDP

"""FSDP2 (`fully_shard`): every rank keeps 1/N of the parameters, gradients and optimizer state.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason, freed, size
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.snippets import ddp_setup, ddp_wrap


class Fsdp2(Knob):
    id = "fsdp2"
    title = "FSDP2 fully_shard (reshard after forward ≈ ZeRO-3, without ≈ ZeRO-2)"
    reference = "https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html"
    fields = ("data_parallel", "reshard_after_forward")
    value = "fsdp"  # applied by perfscope.trial.data_parallel.wrap_model; its variants() set reshard_after_forward too
    shares_field = True
    frees = "optimizer state"
    cost = "parameter all-gathers"

    def code_change(self, ctx: KnobContext) -> str | None:
        optimizer = f"torch.optim.{ctx.model.optimizer_class or 'AdamW'}"
        lines = [ddp_setup(ctx.device), f"-{ddp_wrap(ctx.device)}",
                 "+from torch.distributed.fsdp import fully_shard",
                 "+for block in model.blocks:   # each repeated block: its own all-gather / reduce-scatter unit",
                 "+    fully_shard(block, reshard_after_forward=True)   # False: gathered until backward (≈ ZeRO-2)",
                 "+fully_shard(model, reshard_after_forward=True)"]
        if ctx.base.data_parallel == "zero1":
            lines += [f"-optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class={optimizer}, lr=lr)",
                      f"+optimizer = {optimizer}(model.parameters(), lr=lr)   # built after fully_shard: it steps the shards"]
        else:
            lines.append(f" optimizer = {optimizer}(model.parameters(), lr=lr)   # built after fully_shard: it steps the shards")
        return "\n".join(lines)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.data_parallel == "fsdp":
            return "the loop already shards the model with FSDP"
        return data_parallel_reason(ctx)

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"data_parallel": "fsdp", "reshard_after_forward": True},
                {"data_parallel": "fsdp", "reshard_after_forward": False}]

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        return state_per_rank_notes(baseline, trial)

    def compatible(self, config: TrialConfig) -> bool:
        # DDP's own settings (bucket size, bucket views, static graph, a comm hook) mean nothing under FSDP2.
        return (config.bucket_cap_mb is None and not config.gradient_as_bucket_view and not config.static_graph
                and config.comm_hook is None)


def _state_per_rank(trial: Trial) -> tuple[int, int] | None:
    """(parameters + gradients + optimizer state, optimizer state) of the rank holding the most, counted from its
    tensors after a step; None when a rank did not count them."""
    facts = trial.metrics.distributed if trial.metrics is not None else None
    if facts is None or not facts.ranks:
        return None
    counted = [(r.parameter_bytes, r.gradient_bytes, r.optimizer_state_bytes) for r in facts.ranks]
    if any(b is None for row in counted for b in row):
        return None
    return max((p + g + o, o) for p, g, o in counted)  # type: ignore[operator]


def state_per_rank_notes(baseline: Trial, trial: Trial) -> list[str]:
    """What a sharding run measured it gave back: the training state per rank, against the baseline's."""
    before, after = _state_per_rank(baseline), _state_per_rank(trial)
    if before is None or after is None:
        return []
    (total0, state0), (total1, state1) = before, after
    return [f"parameters + gradients + optimizer state per rank {freed(total0, total1)} "
            f"(optimizer state {size(state0)} → {size(state1)}; the largest rank, counted from its tensors)"]

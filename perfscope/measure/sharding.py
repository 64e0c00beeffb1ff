"""The sharding memory model: bytes of training state per rank under DDP and ZeRO-1/2/3.

Design notes: docs/measurement.md."""

from __future__ import annotations

from perfscope.results.config import TrialConfig
from perfscope.results.distributed import ShardingMemory

DDP = "DDP"
ZERO1 = "ZeRO-1 (ZeroRedundancyOptimizer)"
ZERO2 = "ZeRO-2 (FSDP2, no reshard after forward)"
ZERO3 = "ZeRO-3 (FSDP2, reshard after forward)"


def _shard(nbytes: int, world_size: int) -> int:
    return -(-nbytes // world_size)  # rounded up: the last rank's shard is padded to the others' size


def sharding_memory(parameter_bytes: int, gradient_bytes: int, optimizer_state_bytes: int,
                    world_size: int) -> list[ShardingMemory]:
    """Bytes per rank of parameters, gradients and optimizer state under DDP, ZeRO-1, ZeRO-2 and ZeRO-3, from one
    unsharded replica's bytes."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if min(parameter_bytes, gradient_bytes, optimizer_state_bytes) < 0:
        raise ValueError("byte counts must be >= 0")
    p, g, o = parameter_bytes, gradient_bytes, optimizer_state_bytes
    ps, gs, os_ = (_shard(b, world_size) for b in (p, g, o))
    return [
        ShardingMemory(strategy=DDP, parameters=p, gradients=g, optimizer_state=o),
        ShardingMemory(strategy=ZERO1, parameters=p, gradients=g, optimizer_state=os_),
        ShardingMemory(strategy=ZERO2, parameters=p, gradients=gs, optimizer_state=os_),
        ShardingMemory(strategy=ZERO3, parameters=ps, gradients=gs, optimizer_state=os_),
    ]


def strategy_of(config: TrialConfig) -> str | None:
    """The row of `sharding_memory` a configuration runs (None: one process, or the user's own wrapper)."""
    if config.data_parallel == "fsdp":
        return ZERO3 if config.reshard_after_forward else ZERO2
    return {"ddp": DDP, "zero1": ZERO1}.get(config.data_parallel)

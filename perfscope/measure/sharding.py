"""The sharding memory model: bytes of training state per rank under DDP and ZeRO-1/2/3.

    rows = sharding_memory(parameter_bytes=P, gradient_bytes=G, optimizer_state_bytes=O, world_size=8)
    [(r.strategy, r.total) for r in rows]

Plain data parallelism keeps a whole replica of the parameters, the gradients and the optimizer state on every
rank; the ZeRO stages shard them over the N ranks one after the other: the optimizer state (ZeRO-1:
ZeroRedundancyOptimizer), then the gradients (ZeRO-2: FSDP2 without reshard after forward), then the parameters
(ZeRO-3: FSDP2 resharding after forward). A shard is rounded up (FSDP2 pads each parameter's first dimension).

The inputs are one unsharded replica, in whatever dtypes the run keeps, so the model follows the run's own
convention. Example, a 10B-parameter model trained with fp32 AdamW — 4 B parameters + 4 B gradients + 8 B
moments = 16 B/parameter — on 8 ranks (GB = 10⁹ B):

    DDP      40 + 40 + 80       = 160 GB per rank (fits no 80 GB GPU)
    ZeRO-1   40 + 40 + 80/8     =  90 GB
    ZeRO-2   40 + 40/8 + 80/8   =  55 GB
    ZeRO-3   (40 + 40 + 80) / 8 =  20 GB

The issue's "~80 GB plain DP vs ~20 GB under ZeRO-3" matches these only in part: 80 GB is the parameters and
gradients alone (8 B/parameter), without the optimizer state; 20 GB is ZeRO-3 on 8 ranks, not a limit at large
N (ZeRO-3's share keeps falling as 1/N). The mixed-precision convention of the ZeRO paper (bf16 parameters and
gradients, fp32 master weights and moments: 2 + 2 + 12 B) gives the same 160 GB and 20 GB, but 55 GB for ZeRO-1
and 37.5 GB for ZeRO-2.

Not modelled: activations and temporaries (they do not shard with data parallelism), DDP's gradient buckets
(a second gradient-sized buffer unless gradient_as_bucket_view), and ZeRO-3's transient gathered parameters (one
fully_shard unit at a time, the whole model under ZeRO-2 during the step). ZeRO-2's row counts the parameters whole
because they stay gathered from forward through backward; at rest, after the step, FSDP2 holds them sharded too.
"""

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

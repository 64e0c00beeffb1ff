"""The bus bandwidth one collective reaches alone on the current process group: what the link can do.

Design notes: docs/measurement.md."""

from __future__ import annotations

import torch
import torch.distributed as dist

from perfscope.hardware import BUS_FACTOR, bus_bandwidth_gbps
from perfscope.measure.clock import call_seconds

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
WARMUP = 2


def _collective(op: str, numel: int, world: int, device: torch.device, group: dist.ProcessGroup | None):
    """(the call, the bytes it moves by the NCCL-tests convention) for a payload of about ``numel`` floats."""
    shard = max(1, numel // world)
    if op == "all_reduce":
        data = torch.rand(numel, device=device)
        return lambda: dist.all_reduce(data, group=group), numel * 4
    if op == "broadcast":
        data = torch.rand(numel, device=device)
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return lambda: dist.broadcast(data, src=src, group=group), numel * 4
    if op == "all_gather":  # the payload is the gathered output
        inp, out = torch.rand(shard, device=device), torch.empty(shard * world, device=device)
        return lambda: dist.all_gather_into_tensor(out, inp, group=group), shard * world * 4
    if op == "reduce_scatter":  # the payload is the full input
        inp, out = torch.rand(shard * world, device=device), torch.empty(shard, device=device)
        return lambda: dist.reduce_scatter_tensor(out, inp, group=group), shard * world * 4
    raise ValueError(f"no benchmark for the collective {op!r} (one of {', '.join(OPS)})")


def benchmark_collective(op: str, nbytes: int, *, device: str | torch.device, group: dist.ProcessGroup | None = None,
                         iters: int = 5) -> float | None:
    """Bus GB/s of ``op`` on about ``nbytes`` of float32 alone on ``group`` (default: the world); a collective
    call, so every rank of the group must make it. None in a group of one, where no link is used."""
    if op not in OPS or op not in BUS_FACTOR:
        raise ValueError(f"no benchmark for the collective {op!r} (one of {', '.join(OPS)})")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    world = dist.get_world_size(group)
    call, moved = _collective(op, max(1, nbytes // 4), world, device, group)
    times = torch.tensor(call_seconds(call, device, warmup=WARMUP, repeats=iters), dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(times, op=dist.ReduceOp.MIN, group=group)  # each call as the last rank to arrive saw it
    return bus_bandwidth_gbps(op, moved, float(times.min()), world)


__all__ = ["OPS", "benchmark_collective"]

"""What this machine reaches, measured: the matmul ceiling per dtype, misaligned GEMMs, a collective alone.

Design notes: docs/measurement.md."""

from __future__ import annotations

import torch
import torch.distributed as dist

from perfscope.hardware import BUS_FACTOR, bus_bandwidth_gbps
from perfscope.measure.clock import MIN_REPEATS, call_seconds, fastest_seconds, median_seconds
from perfscope.precision import Precision
from perfscope.results.trace_facts import GemmAlignment, GemmShape
from perfscope.tf32_api import restore_matmul_tf32, set_matmul_tf32, snapshot_matmul_tf32

_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


CALL_BUDGET_S = 0.05
"""Longest one timed matmul of the ceiling probe may take (the probe runs before every analysis)."""
MIN_SIZE = 256
SLOW_SMALL_CALL_S = 1e-3
"""A 256³ matmul slower than this (< 0.034 TFLOP/s) marks a slow path whose full-size matmul is shrunk."""


def measure_matmul_tflops(device: str, dtype: str, *, size: int | None = None, repeats: int = MIN_REPEATS) -> float:
    """TFLOP/s of a square matmul on ``device`` at its fastest call: the ceiling this machine really reaches."""
    if size is None:
        size = 8192 if device == "cuda" else 1024
    torch_dtype = _TORCH_DTYPES[dtype]
    previous_tf32 = snapshot_matmul_tf32()
    set_matmul_tf32(dtype == "tf32")
    try:
        # Size the matmul from a small one first: a dtype this device computes slowly (bf16 on a CPU without
        # bf16 units: 2.4 s per 1024³ matmul) would otherwise make the probe, run before every analysis, take
        # half a minute. Large enough to reach the ceiling, small enough that one call stays within budget.
        small = 0.0
        if size > MIN_SIZE:
            a = torch.randn(MIN_SIZE, MIN_SIZE, device=device, dtype=torch_dtype)
            b = torch.randn(MIN_SIZE, MIN_SIZE, device=device, dtype=torch_dtype)
            small = median_seconds(lambda: torch.mm(a, b), device, warmup=1, repeats=1)
        if small > SLOW_SMALL_CALL_S:  # compute-bound even at 256³ (a fast GPU's small call is launch latency)
            fits = int(MIN_SIZE * (CALL_BUDGET_S / small) ** (1 / 3)) // 64 * 64
            size = max(MIN_SIZE, min(size, fits))
        a = torch.randn(size, size, device=device, dtype=torch_dtype)
        b = torch.randn(size, size, device=device, dtype=torch_dtype)
        seconds = fastest_seconds(lambda: torch.mm(a, b), device, warmup=2, repeats=repeats)
        return 2.0 * size**3 / seconds / 1e12
    finally:
        restore_matmul_tf32(previous_tf32)


def ceiling_dtypes(device: str) -> list[str]:
    """Dtypes worth a measured ceiling: on CUDA those with tensor-core paths, on CPU fp32 and bf16."""
    if device == "cuda":
        dtypes = ["fp32", "tf32", "fp16"]
        if torch.cuda.is_bf16_supported():
            dtypes.append("bf16")
        return dtypes
    return ["fp32", "bf16"]


PAD_TO = 64
CPU_MAX_ELEMENTS = 2_000_000  # keep the CPU benchmark under a couple of seconds
MIN_FLOPS = 1e7  # below this a matmul is launch/dispatch overhead, and padding it says nothing about tiles


def _time_mm(m: int, k: int, n: int, device: str, dtype: torch.dtype, repeats: int) -> float:
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return median_seconds(lambda: torch.mm(a, b), device, warmup=3, repeats=repeats)


def alignment_dtypes(precision: Precision) -> list[str]:
    """The run's own dtype, and for an fp32 run also bf16: the autocast dtype a recommendation would run its
    matmuls in (amp_bf16; fp16 tiles align the same way: multiples of 8, better 64)."""
    return [precision] if precision != "fp32" else ["fp32", "bf16"]


def benchmark_alignment_for(gemm_shapes: list[GemmShape], *, device: str, precision: Precision) -> list[GemmAlignment]:
    """`benchmark_alignment` in each of `alignment_dtypes(precision)` (rows carry their dtype)."""
    return [row for dtype in alignment_dtypes(precision) for row in benchmark_alignment(gemm_shapes, device=device, dtype=dtype)]


def benchmark_alignment(gemm_shapes: list[GemmShape], *, device: str, dtype: str = "fp32", top: int = 3, repeats: int = 20) -> list[GemmAlignment]:
    """Measured speed-up per FLOP of padding the hottest misaligned GEMM shapes."""
    rows: list[GemmAlignment] = []
    torch_dtype = _TORCH_DTYPES.get(dtype, torch.float32)
    for shape in [g for g in gemm_shapes if g.misaligned][: top * 3]:
        if len(rows) >= top:
            break
        m, k, n = (int(v) for v in shape.shape)
        padded = [-(-v // PAD_TO) * PAD_TO for v in (m, k, n)]
        if 2.0 * m * k * n < MIN_FLOPS:
            continue
        if device != "cuda" and max(m * k, k * n, padded[0] * padded[1], padded[1] * padded[2]) > CPU_MAX_ELEMENTS:
            continue
        try:
            t = _time_mm(m, k, n, device, torch_dtype, repeats)
            tp = _time_mm(*padded, device, torch_dtype, repeats)
        except Exception:  # noqa: BLE001 - a shape the device cannot run is simply not reported
            continue
        flops, padded_flops = 2.0 * m * k * n, 2.0 * padded[0] * padded[1] * padded[2]
        rows.append(GemmAlignment(shape=[m, k, n], padded=padded, dtype=dtype, time_s=t, padded_time_s=tp,
                                  speedup_per_flop=(t / flops) / (tp / padded_flops)))
    return rows


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
    # reduce_scatter (benchmark_collective checked the name): the payload is the full input
    inp, out = torch.rand(shard * world, device=device), torch.empty(shard, device=device)
    return lambda: dist.reduce_scatter_tensor(out, inp, group=group), shard * world * 4


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


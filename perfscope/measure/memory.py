"""Memory: peaks from the CUDA caching allocator, and who owns the bytes. Design notes: docs/measurement.md."""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from perfscope.results import MemoryBreakdown
from perfscope.results.config import TrialConfig
from perfscope.results.distributed import ShardingMemory


def _plain_tensors(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensors holding ``t``'s bytes: itself, or, for a wrapper subclass (torchao's 8-bit optimizer state:
    uint8 codes + scales + a code book), the inner tensors it flattens to, which own the storage."""
    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is None:
        yield t
        return
    names, _ = flatten()
    for name in names:
        inner = getattr(t, name)
        if isinstance(inner, torch.Tensor):
            yield from _plain_tensors(inner)


def _tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen: set[int] = set()
    total = 0
    for t in (p for t in tensors if isinstance(t, torch.Tensor) for p in _plain_tensors(t)):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen and key != 0:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def parameter_bytes(model: nn.Module) -> int:
    return _tensor_bytes(model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    return _tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def trainable_parameter_bytes(model: nn.Module) -> int:
    """Bytes of the gradients the trainable parameters will have, sized from the parameters when the gradients
    were freed (set_to_none): this rank's local shards under FSDP (a DTensor's numel() is the global size)."""
    return sum(t.numel() * t.element_size() for p in model.parameters() if p.requires_grad for t in _plain_tensors(p))


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return _tensor_bytes(v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor))


def breakdown(model: nn.Module, optimizer: torch.optim.Optimizer, peak_bytes: int | None, *, grads_present: bool) -> MemoryBreakdown:
    """Owners of the peak. Gradients are sized from the parameters when they were already freed (set_to_none)."""
    params = parameter_bytes(model)
    grads = gradient_bytes(model) if grads_present else trainable_parameter_bytes(model)
    state = optimizer_state_bytes(optimizer)
    rest = None if peak_bytes is None else max(peak_bytes - params - grads - state, 0)
    return MemoryBreakdown(parameters=params, gradients=grads, optimizer_state=state, activations_and_temporaries=rest)


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def device_peaks(device: str, index: int | None = None) -> tuple[int | None, int | None]:
    """(peak allocated, peak reserved) since the last reset, of CUDA device ``index`` (else the current one);
    (None, None) on CPU."""
    if device == "cuda":
        return int(torch.cuda.max_memory_allocated(index)), int(torch.cuda.max_memory_reserved(index))
    return None, None


def device_capacity(device: str, index: int | None = None) -> int | None:
    """Total memory of the CUDA device (``index``, else the current one); None on CPU."""
    if device != "cuda":
        return None
    return int(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).total_memory)


def peak_memory_reader(device: torch.device) -> Callable[[], int]:
    """What the loggers report as peak memory: CUDA, the caching allocator's max allocated (read, never reset,
    so perfscope's own resets stay the only ones); CPU, this process's peak RSS."""
    if device.type == "cuda":
        return lambda: int(torch.cuda.max_memory_allocated(device))
    return process_peak_rss_bytes


def process_peak_rss_bytes() -> int:
    """Peak resident set of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


DDP = "DDP"
ZERO1 = "ZeRO-1 (ZeroRedundancyOptimizer)"
ZERO2 = "ZeRO-2 (FSDP2, no reshard after forward)"
ZERO3 = "ZeRO-3 (FSDP2, reshard after forward)"


def sharding_memory(parameter_bytes: int, gradient_bytes: int, optimizer_state_bytes: int,
                    world_size: int) -> list[ShardingMemory]:
    """Bytes per rank of parameters, gradients and optimizer state under DDP, ZeRO-1, ZeRO-2 and ZeRO-3, from one
    unsharded replica's bytes."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if min(parameter_bytes, gradient_bytes, optimizer_state_bytes) < 0:
        raise ValueError("byte counts must be >= 0")
    p, g, o = parameter_bytes, gradient_bytes, optimizer_state_bytes
    ps, gs, os_ = (-(-b // world_size) for b in (p, g, o))  # rounded up: the last rank's shard is padded to the others' size
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

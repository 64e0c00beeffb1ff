"""Warm-up until the DataLoader's prefetch queue is in steady state, so the timed window does not open on it full.

Design notes: docs/measurement.md."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from perfscope.measure.clock import synchronize
from perfscope.results.config import TrialConfig
from perfscope.trial.data_parallel import current_rank

DRAIN_DEPTHS = 4
DRAIN_WAIT_S = 1e-3
DRAIN_WAIT_SHARE = 0.05
BLOCKED_OVER_READY = 3.0


class DataWaits:
    """Times each `next(loader)` of a step (the data_begin/data_end pair TrainStep calls on a recorder)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._start = 0.0

    def data_begin(self) -> None:
        self._start = time.perf_counter()

    def data_end(self) -> None:
        self.waits.append(time.perf_counter() - self._start)


@dataclass
class PrefetchDrain:
    depth: int
    """Micro-batches the queue holds: num_workers × prefetch_factor."""
    times: list[float] = field(default_factory=list)
    """Wall time of each extra warm-up step."""
    losses: list[torch.Tensor] = field(default_factory=list)
    """Each extra step's loss (device tensors): steps the trial took before its window, which the numerics guard
    counts so that it compares the same global step in every trial (perfscope.search.numerics)."""
    drained: bool = False

    @property
    def calibration_times(self) -> list[float]:
        """Steady-state step times for the window's calibration (a first entry, dropped by it as the warm-up's)."""
        return [self.times[0], *self.times]

    @property
    def words(self) -> str:
        steps = f"{len(self.times)} extra warm-up step(s)"
        if self.drained:
            return (f"{steps}: the DataLoader's prefetch queue ({self.depth} batches) used up and drained "
                    "(next() blocked): the window starts in steady state")
        return (f"{steps}: the DataLoader's prefetch queue ({self.depth} batches) used up {DRAIN_DEPTHS} times without "
                "next() blocking beyond a ready batch's cost (the loader keeps up; a full queue is its steady state)")


def _any_rank(flag: bool, device: str) -> bool:
    """True when any data-parallel rank says so: every rank must take the same number of steps (collectives)."""
    if current_rank() is None:
        return flag
    import torch.distributed as dist

    value = torch.tensor([int(flag)], dtype=torch.int64, device="cuda" if device == "cuda" else "cpu")
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def drain_prefetch(step: Callable[[Any], tuple[torch.Tensor, Any]], config: TrialConfig, warmup_times: list[float]) -> PrefetchDrain | None:
    """Untimed steps until the prefetch queue is in steady state (see the module docstring); None without workers
    or when the user's batches() feeds the loop (no DataLoader perfscope controls)."""
    if not config.num_workers:
        return None
    depth = config.num_workers * (config.prefetch_factor or 2)
    typical = statistics.median(warmup_times[1:]) if len(warmup_times) > 1 else 0.0
    floor = max(DRAIN_WAIT_S, DRAIN_WAIT_SHARE * typical)
    first_depth = math.ceil(depth / config.grad_accum_steps)
    drain = PrefetchDrain(depth=depth)
    ready: list[float] = []
    for i in range(math.ceil(DRAIN_DEPTHS * depth / config.grad_accum_steps)):
        waits = DataWaits()
        synchronize(config.device)
        start = time.perf_counter()
        loss, _ = step(waits)
        synchronize(config.device)
        drain.times.append(time.perf_counter() - start)
        drain.losses.append(loss)
        if i < first_depth:  # the warm-up's backlog: what taking a ready batch costs
            ready += waits.waits
            continue
        blocked_at = max(floor, BLOCKED_OVER_READY * statistics.median(ready)) if ready else floor
        if not _any_rank(max(waits.waits, default=0.0) < blocked_at, config.device):
            drain.drained = True
            break
    return drain

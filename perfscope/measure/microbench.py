"""Median time of one small device operation: the loop the matmul ceiling and the GEMM alignment benchmark share.

Design notes: docs/measurement.md."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from perfscope.measure.clock import clock_for, synchronize

MIN_REPEATS = 10


def median_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> float:
    """Median seconds of ``fn()`` on ``device`` (CUDA: device time between events; CPU: host clock)."""
    return statistics.median(call_seconds(fn, device, warmup=warmup, repeats=repeats))


def fastest_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> float:
    """The fastest call: for a *ceiling* (what the machine can reach), where a neighbour or a preemption only
    ever slows a call down — on a loaded 2-core CPU the median once put the matmul ceiling at a third of it."""
    return min(call_seconds(fn, device, warmup=warmup, repeats=repeats))


def call_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones (see the module docstring)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    clock = clock_for(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    marks = []
    for _ in range(repeats):
        start = clock.mark()
        fn()
        marks.append((start, clock.mark()))
    clock.wait(marks[-1][1])
    return [clock.elapsed_s(start, end) for start, end in marks]

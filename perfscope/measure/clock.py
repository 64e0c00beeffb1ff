"""Step-boundary clocks: the only place perfscope reads a time around device work. Design notes: docs/measurement.md."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Clock(Protocol):
    device_type: str

    def now(self) -> float: ...

    def mark(self) -> Any: ...

    def ready(self, mark: Any) -> bool: ...

    def wait(self, mark: Any) -> None: ...

    def elapsed_s(self, start: Any, end: Any) -> float: ...


class HostClock:
    """CPU work is synchronous: perf_counter at the boundary is exact."""

    device_type = "cpu"

    def __init__(self, now: Callable[[], float] | None = None) -> None:
        self.now = now if now is not None else time.perf_counter  # looked up now: a test may stand in for `time`

    def mark(self) -> float:
        return self.now()

    def ready(self, mark: float) -> bool:
        return True

    def wait(self, mark: float) -> None:
        pass

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start


class CudaClock:
    """CUDA events on the stream current at the boundary; never a device-wide synchronize."""

    device_type = "cuda"

    def __init__(self, device: torch.device, now: Callable[[], float] | None = None) -> None:
        self.device, self.now = device, now if now is not None else time.perf_counter

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def ready(self, mark: torch.cuda.Event) -> bool:
        return bool(mark.query())  # cudaEventQuery: non-blocking

    def wait(self, mark: torch.cuda.Event) -> None:
        mark.synchronize()  # this event only

    def elapsed_s(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1e3


def clock_for(device: torch.device | str, now: Callable[[], float] | None = None) -> HostClock | CudaClock:
    """The step-boundary clock of ``device``; ``now``: the host's clock (a test's simulated time)."""
    device = torch.device(device)
    return CudaClock(device, now) if device.type == "cuda" else HostClock(now)


def synchronize(device: torch.device | str) -> None:
    """Wait for all queued work on ``device``: only outside timed windows (warm-up, FLOP counting, probes)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


MIN_REPEATS = 10


def median_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> float:
    """Median seconds of ``fn()`` on ``device`` (CUDA: device time between events; CPU: host clock)."""
    return statistics.median(call_seconds(fn, device, warmup=warmup, repeats=repeats))


def fastest_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> float:
    """The fastest call: for a *ceiling* (what the machine can reach), where a neighbour or a preemption only
    ever slows a call down — on a loaded 2-core CPU the median once put the matmul ceiling at a third of it."""
    return min(call_seconds(fn, device, warmup=warmup, repeats=repeats))


def call_seconds(fn: Callable[[], object], device: str | torch.device, *, warmup: int = 3, repeats: int = MIN_REPEATS) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones (docs/measurement.md)."""
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

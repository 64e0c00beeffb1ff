"""Per-step timing that never reads a host clock on un-synchronized device work.

    timer = StepTimer("cuda")
    timer.start()
    for step in range(n):
        with timer.data_wait():
            batch = next(it)
        train_step(batch)
        timer.step_end()
    step_times, data_waits = timer.finish()

On CUDA, step boundaries are CUDA events recorded on the current stream and read once at the end, so
timing adds no per-step synchronization (the host may run ahead, as in the user's own loop); a step's
time is the device-timeline distance between consecutive boundaries, which includes any time the GPU
sat idle waiting for the host or for data. On CPU, work is synchronous and perf_counter is exact.
Data wait is host time blocked on the data iterator — compare it with the step time to see a data-bound
step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StepTimer:
    def __init__(self, device: str) -> None:
        self.device = device
        self._events: list[torch.cuda.Event] = []
        self._host_marks: list[float] = []
        self._data_waits: list[float] = []
        self._current_wait = 0.0

    def _mark(self) -> None:
        if self.device == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append(event)
        else:
            self._host_marks.append(time.perf_counter())

    def start(self) -> None:
        """Begin timing: drains queued device work so the first step starts from an idle device."""
        if self.device == "cuda":
            torch.cuda.synchronize()
        self._mark()

    @contextmanager
    def data_wait(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._current_wait += time.perf_counter() - start

    def step_end(self) -> None:
        self._mark()
        self._data_waits.append(self._current_wait)
        self._current_wait = 0.0

    @property
    def steps_recorded(self) -> int:
        return len(self._data_waits)

    def finish(self) -> tuple[list[float], list[float]]:
        """(step times, data waits) in seconds; synchronizes once to read the events."""
        if self.device == "cuda":
            if self._events:
                self._events[-1].synchronize()
            times = [a.elapsed_time(b) / 1e3 for a, b in zip(self._events, self._events[1:])]
        else:
            times = [b - a for a, b in zip(self._host_marks, self._host_marks[1:])]
        return times, list(self._data_waits)


def synchronize(device: str) -> None:
    """Wait for queued device work; call before reading a host clock around device work."""
    if device == "cuda":
        torch.cuda.synchronize()

"""Python GC collections and the time spent in them, counted with gc.callbacks while a window runs.

Design notes: docs/measurement.md."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any


class GcPauses:
    def __init__(self, step_of: Callable[[], int] | None = None) -> None:
        self.collections = 0
        self.pause_s = 0.0
        self._t0: float | None = None
        self._step_of = step_of
        self._by_step: dict[int, float] = {}

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            pause = time.perf_counter() - self._t0
            self.pause_s += pause
            self.collections += 1
            self._t0 = None
            if self._step_of is not None:
                step = self._step_of()
                self._by_step[step] = self._by_step.get(step, 0.0) + pause

    def per_step(self, steps: int) -> list[float]:
        """Seconds of collector pauses in each of the window's ``steps`` steps (empty without ``step_of``)."""
        if self._step_of is None:
            return []
        return [self._by_step.get(i, 0.0) for i in range(steps)]

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

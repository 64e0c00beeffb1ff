"""Python GC collections and the time spent in them, counted with gc.callbacks while a window runs.

    with GcPauses() as pauses:
        ...timed steps...
    pauses.collections, pauses.pause_s

Why: a GC pause stalls the rank it lands in, and in synchronous data parallelism every other rank waits for it at
the next all-reduce; counting collections per rank is how a GC straggler is told from a slow device. The callback
costs two clock reads per collection, nothing per step.
"""

from __future__ import annotations

import gc
import time
from typing import Any


class GcPauses:
    def __init__(self) -> None:
        self.collections = 0
        self.pause_s = 0.0
        self._t0: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.pause_s += time.perf_counter() - self._t0
            self.collections += 1
            self._t0 = None

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

"""The hooks' utilization sampler (perfscope.measure.utilization), bounded in time for long runs.

    sampler = BoundedSampler("cuda", 0, interval_s=0.1, max_s=600)
    sampler.start(); ...; sampler.check(); ...; sampler.stop()
    sampler.result()         # a snapshot while it runs, the frozen result once stopped

Started after warm-up (thread start-up is not timed); stopped after ``max_s`` so a week-long run does not keep
a week of samples: the result then covers the first ``max_s`` seconds.
"""

from __future__ import annotations

import time
from typing import Any


class BoundedSampler:
    def __init__(self, device_type: str, device_index: int | None, *, interval_s: float, max_s: float) -> None:
        self.device_type, self.device_index = device_type, device_index
        self.interval_s, self.max_s = interval_s, max_s
        self.sampler: Any = None
        self.started = 0.0
        self.frozen: Any = None

    @property
    def nvml_handle(self) -> Any:
        return getattr(self.sampler, "nvml_handle", None)

    def start(self) -> None:
        from perfscope.measure.utilization import UtilizationSampler

        self.sampler = UtilizationSampler(device=self.device_type, device_index=self.device_index,
                                          interval_s=self.interval_s)
        self.sampler.__enter__()
        self.started = time.perf_counter()

    def check(self) -> None:
        """Stop after ``max_s`` and keep the result."""
        if self.sampler is not None and time.perf_counter() - self.started > self.max_s:
            self.stop()

    def stop(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.__exit__(None, None, None)
            self.frozen = sampler.result()

    def result(self) -> Any:
        return self.sampler.result() if self.sampler is not None else self.frozen

"""What the hooks read of the device beside the steps: its utilization, sampled for a bounded time after warm-up
(BoundedSampler), and the watch's clock readings (clock_reader, throttled). Design notes: docs/hooks.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from perfscope.measure.lazy_msg import msg

if TYPE_CHECKING:
    from perfscope.results.messages import Message

CLOCK_DROP = 0.10
"""The least relative clock drop named as throttling."""


@dataclass(frozen=True)
class ClockReading:
    source: str
    """What was read: "GPU SM clock" (NVML) or "CPU clock" (psutil)."""
    mhz: float | None
    reasons: tuple[str, ...] = ()
    """NVML's active throttle (clocks event) reasons that slow compute."""


def throttled(before: ClockReading | None, after: ClockReading | None) -> Message | None:
    """The change worth naming between two readings, or None (no reading, no drop, no new reason)."""
    if before is None or after is None or before.source != after.source:
        return None
    new = [r for r in after.reasons if r not in before.reasons]
    fell = bool(before.mhz and after.mhz and after.mhz < (1 - CLOCK_DROP) * before.mhz)
    if not new and not fell:
        return None
    both = bool(before.mhz and after.mhz)
    return msg("clock_throttled", source=before.source, before=before.mhz if both else None,
               after=after.mhz if both else None, reasons=new)


def clock_reader(device: torch.device) -> Callable[[], ClockReading | None]:
    """A reader for ``device``'s clock; it returns None where nothing can be read (no NVML, no cpufreq), never raises."""
    return _NvmlClock(device.index) if device.type == "cuda" else _cpu_clock


def _cpu_clock() -> ClockReading | None:
    try:
        import psutil

        freq = psutil.cpu_freq()
    except Exception:  # noqa: BLE001 - no cpufreq (containers, some VMs): nothing to name
        return None
    return ClockReading("CPU clock", float(freq.current)) if freq and freq.current else None


class _NvmlClock:
    """NVML is opened at the first reading (the watch's reference), not when the Profiler is made."""

    def __init__(self, index: int | None) -> None:
        self.index, self._nvml, self._handle, self._failed = index, None, None, False

    def __call__(self) -> ClockReading | None:
        if self._failed:
            return None
        try:
            from perfscope.measure.utilization import current_cuda_index, nvml_handle, open_nvml, throttle_names

            if self._handle is None:
                self._nvml = nv = open_nvml()
                self._handle, _ = nvml_handle(nv, current_cuda_index() if self.index is None else self.index)
            nv, h = self._nvml, self._handle
            reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            return ClockReading("GPU SM clock", float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                                tuple(throttle_names(nv, reasons(h))))
        except Exception:  # noqa: BLE001 - no NVML (MIG, no driver): the watch names what else changed
            self._failed = True
            return None


class BoundedSampler:
    """perfscope.measure.utilization's sampler, stopped after ``max_s``: a week-long run keeps its first ``max_s``
    seconds of samples, not a week of them."""

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
                                          interval_s=self.interval_s).__enter__()
        self.started = time.perf_counter()

    def check(self) -> None:
        if self.sampler is not None and time.perf_counter() - self.started > self.max_s:
            self.stop()

    def stop(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.__exit__(None, None, None)
            self.frozen = sampler.result()

    def result(self) -> Any:
        return self.sampler.result() if self.sampler is not None else self.frozen

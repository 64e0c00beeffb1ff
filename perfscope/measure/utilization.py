"""A background sampler of device (NVML) and host (psutil) load during the measured steps.

Design notes: docs/measurement.md."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psutil
import torch

from perfscope.results import Utilization, UtilizationSample
from perfscope.results.messages import Message, error, msg
from perfscope.stats import summarize

MAX_TIMELINE_SAMPLES = 600


def throttle_names(pynvml: Any, mask: int) -> list[str]:
    """Decode NVML's clocks-event/throttle bitmask into the reasons that slow compute."""
    names = {
        "SW power cap": "nvmlClocksThrottleReasonSwPowerCap",
        "HW slowdown": "nvmlClocksThrottleReasonHwSlowdown",
        "HW thermal slowdown": "nvmlClocksThrottleReasonHwThermalSlowdown",
        "HW power brake": "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
        "SW thermal slowdown": "nvmlClocksThrottleReasonSwThermalSlowdown",
    }
    return [name for name, attr in names.items() if mask & int(getattr(pynvml, attr, 0))]


class UtilizationSampler:
    def __init__(self, *, device: str, device_index: int | None = None, interval_s: float = 0.1) -> None:
        """``device_index`` None: this process's current CUDA device (each rank its own GPU, not device 0)."""
        self.device = device
        self.interval_s = interval_s
        self._samples: list[UtilizationSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unavailable: dict[str, Message] = {}
        self._nvml: Any = None
        self._handle: Any = None
        self._sm_clock_max: float | None = None
        self.nvml_uuid: str | None = None
        """The NVML device sampled ("GPU-..." or "MIG-..."), once found."""
        if device == "cuda":
            try:
                index = current_cuda_index() if device_index is None else device_index
            except Exception as exc:  # noqa: BLE001 - no CUDA device to ask: no GPU sample, with the reason
                self._unavailable["gpu"] = msg("no_cuda_device", error=error(exc))
            else:
                self._open_nvml(index)
        else:
            self._unavailable["gpu"] = msg("cpu_no_gpu_sample")

    def _open_nvml(self, index: int) -> None:
        """NVML handle of CUDA device ``index``, found by UUID (see `nvml_handle`): never by index."""
        try:
            pynvml = open_nvml()
        except Exception as exc:  # noqa: BLE001 - degrade: no NVML is a recorded reason, not a failure
            self._unavailable["gpu"] = msg("nvml_unavailable", error=error(exc))
            return
        try:
            self._handle, self.nvml_uuid = nvml_handle(pynvml, index)
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - never fall back to an index: that samples the wrong GPU
            self._unavailable["gpu"] = msg("nvml_device_not_found", index=index, error=error(exc))
            close_nvml(pynvml)
            return
        try:  # read once: the reference the throttling rule compares the sampled clocks with
            self._sm_clock_max = float(pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM))
        except Exception as exc:  # noqa: BLE001
            self._unavailable["sm_clock_max_mhz"] = msg("nvml_error", error=error(exc))

    @property
    def nvml_handle(self) -> Any:
        """The NVML device handle (None without NVML), shared with the contention probe."""
        return self._handle

    def _read_gpu(self, sample: UtilizationSample) -> None:
        nv, h = self._nvml, self._handle
        # Renamed "clocks event reasons" in newer NVML; the old name is kept as an alias there.
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        for field_name, read in (
            ("gpu_util_percent", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("gpu_memory_used_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used)),
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ("throttle_reasons", lambda: throttle_names(nv, reasons(h))),
        ):
            if field_name in self._unavailable:
                continue
            try:
                setattr(sample, field_name, read())
            except Exception as exc:  # noqa: BLE001 - e.g. NVML_ERROR_NOT_SUPPORTED under MIG
                self._unavailable[field_name] = msg("nvml_error", error=error(exc))

    def _run(self) -> None:
        t0 = time.perf_counter()
        psutil.cpu_percent(interval=None)  # prime: the first call has no interval to report on
        while not self._stop.wait(self.interval_s):
            sample = UtilizationSample(t_s=time.perf_counter() - t0, cpu_percent=psutil.cpu_percent(interval=None))
            if self._nvml is not None:
                self._read_gpu(sample)
            self._samples.append(sample)

    def __enter__(self) -> UtilizationSampler:
        self._thread = threading.Thread(target=self._run, name="perfscope-utilization", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._nvml is not None:
            close_nvml(self._nvml)

    def result(self) -> Utilization:
        samples = self._samples
        util = Utilization(unavailable=dict(self._unavailable))
        if not samples:
            util.unavailable.setdefault("samples", msg("shorter_than_sampling"))
            return util

        for name in ("gpu_util_percent", "power_w", "sm_clock_mhz", "cpu_percent"):
            values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
            setattr(util, name, summarize(values) if values else None)
        util.sm_clock_max_mhz = self._sm_clock_max
        memory = [s.gpu_memory_used_bytes for s in samples if s.gpu_memory_used_bytes is not None]
        util.gpu_memory_used_bytes_max = max(memory) if memory else None
        util.throttle_reasons_seen = sorted({r for s in samples for r in s.throttle_reasons})
        stride = max(1, len(samples) // MAX_TIMELINE_SAMPLES)
        util.samples = samples[::stride]
        return util


def open_nvml() -> Any:
    """pynvml, initialised (raises when NVML is absent: a CPU box, WSL, a container without the driver)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def close_nvml(pynvml: Any) -> None:
    with contextlib.suppress(Exception):
        pynvml.nvmlShutdown()


def current_cuda_index() -> int:
    """The CUDA device this process's "cuda" means: a data-parallel rank's, set from its LOCAL_RANK by
    torch.cuda.set_device (perfscope.trial.data_parallel). Never a blanket 0: every rank would sample GPU 0."""
    return int(torch.cuda.current_device())


def cuda_uuid(index: int) -> str:
    """The UUID CUDA reports for device ``index``, without NVML's prefix."""
    return str(torch.cuda.get_device_properties(index).uuid).removeprefix("GPU-").removeprefix("MIG-")


def nvml_handle(pynvml: Any, index: int) -> tuple[Any, str]:
    """(NVML handle, NVML UUID) of CUDA device ``index``, found by UUID (NVML's indices ignore CUDA_VISIBLE_DEVICES
    and CUDA's device order): the whole GPU's spelling, then a MIG instance's; LookupError when NVML has neither."""
    errors = []
    for candidate in ("GPU-" + cuda_uuid(index), "MIG-" + cuda_uuid(index)):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(candidate), candidate
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotFound and friends: try the next spelling
            errors.append(f"{candidate}: {type(exc).__name__}: {exc}")
    raise LookupError(f"NVML knows no device with the UUID of CUDA device {index} ({'; '.join(errors)})")


def is_mig_uuid(nvml_uuid: str | None) -> bool:
    return bool(nvml_uuid) and nvml_uuid.startswith("MIG-")  # type: ignore[union-attr]

"""What machine is this? Device, drivers, versions, CPU — recorded with every run.

The CI gate refuses to compare runs whose environments differ, and a reader of a report needs to know
what hardware the figures came from. Anything that cannot be read is recorded with its reason.
"""

from __future__ import annotations

import platform
import socket
import sys
from contextlib import nullcontext

import psutil
import torch

from perfscope.measure.nvml import cuda_uuid
from perfscope.measure.peaks import (
    ceiling_dtypes,
    datasheet_peak,
    measure_matmul_tflops,
)
from perfscope.results import Environment


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_driver_version() -> tuple[str | None, str | None]:
    """(driver version, reason if unavailable)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return (version.decode() if isinstance(version, bytes) else str(version)), None
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - NVML absent (CPU box, WSL, container without driver)
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"


def _uuid(index: int) -> str | None:
    try:
        return "GPU-" + cuda_uuid(index)
    except Exception:  # noqa: BLE001 - an old torch without props.uuid
        return None


def collect_environment(device: str, *, device_index: int = 0, measure_ceiling: bool = True) -> Environment:
    """Describe this machine for ``device`` ('cpu' or 'cuda'); on CUDA the device the run uses (``device_index``,
    a CUDA index) and the list of all visible devices; optionally measure matmul ceilings (on that device)."""
    env = Environment(
        device_type=device,
        device_name=_cpu_model() if device == "cpu" else torch.cuda.get_device_name(device_index),
        torch_version=torch.__version__,
        python_version=sys.version.split()[0],
        platform=platform.platform(),
        cpu_model=_cpu_model(),
        cpu_cores_physical=psutil.cpu_count(logical=False),
        cpu_cores_logical=psutil.cpu_count(logical=True),
        host_memory_bytes=psutil.virtual_memory().total,
        hostname=socket.gethostname(),
    )
    if device == "cuda":
        props = torch.cuda.get_device_properties(device_index)
        env.device_count = torch.cuda.device_count()
        env.device_index = device_index
        env.device_uuid = _uuid(device_index)
        env.visible_devices = [f"{torch.cuda.get_device_name(i)} ({_uuid(i) or 'uuid unknown'})" for i in range(env.device_count)]
        env.compute_capability = f"{props.major}.{props.minor}"
        env.device_memory_bytes = int(props.total_memory)
        env.cuda_version = torch.version.cuda
        env.driver_version, reason = _nvml_driver_version()
        if reason:
            env.unavailable["driver_version"] = reason
        peak = datasheet_peak(env.device_name)
        if peak is None:
            env.unavailable["datasheet_peaks_tflops"] = (
                f"no datasheet entry for {env.device_name!r}; MFU uses the measured matmul ceiling (or --peak-tflops)"
            )
        else:
            env.datasheet_peaks_tflops = dict(peak.tflops)
            env.datasheet_source = f"{peak.name}: {peak.source}"
    else:
        env.unavailable["datasheet_peaks_tflops"] = "CPUs have no comparable datasheet peak; MFU uses the measured matmul ceiling"
        env.unavailable["device_memory_bytes"] = "CPU: host memory is the device memory"
    if measure_ceiling:
        # On the run's device: torch.cuda.device makes it current for the ceiling's matmuls.
        with torch.cuda.device(device_index) if device == "cuda" else nullcontext():
            for dtype in ceiling_dtypes(device):
                try:
                    env.measured_ceiling_tflops[dtype] = round(measure_matmul_tflops(device, dtype), 4)
                except Exception as exc:  # noqa: BLE001 - a dtype the device cannot run is not an error
                    env.unavailable[f"measured_ceiling_tflops.{dtype}"] = f"{type(exc).__name__}: {exc}"
    return env

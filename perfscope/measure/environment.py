"""What machine is this? Device, drivers, versions, CPU — recorded with every run. Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
import platform
import socket
import sys

import psutil
import torch

from perfscope.hardware import datasheet_peak, is_mig_name, slice_peak
from perfscope.measure.ceiling_cache import cached_ceilings, ceiling_key, measure_each
from perfscope.measure.cores import numa_nodes, usable_cores
from perfscope.measure.peaks import ceiling_dtypes, measure_matmul_tflops
from perfscope.measure.utilization import close_nvml, cuda_uuid, is_mig_uuid, nvml_handle, open_nvml
from perfscope.results import Environment
from perfscope.results.messages import Message, error, msg


def _cpu_model() -> tuple[str | None, Message | None]:
    """(model name, None), or (None, why): the architecture ("x86_64") is not a CPU model, so it is not given as one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip(), None
        why = msg("cpuinfo_no_model")
    except OSError as exc:
        why = msg("unreadable", path="/proc/cpuinfo", error=str(exc.strerror or exc))
    processor = platform.processor()
    if processor and processor != platform.machine():
        return processor, None
    return None, msg("cpu_model_unknown", why=why, machine=platform.machine() or "unknown")


def _nvml_facts(env: Environment, index: int) -> bool:
    """The driver version and the run's device as NVML sees it (found by UUID: see perfscope.measure.utilization)
    into ``env``; whether NVML says the device is a MIG slice (a MIG UUID, or MIG mode on its GPU)."""
    try:
        pynvml = open_nvml()
    except Exception as exc:  # noqa: BLE001 - NVML absent (CPU box, WSL, container without driver)
        env.unavailable["driver_version"] = msg("nvml_unavailable", error=error(exc))
        return False
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        env.driver_version = version.decode() if isinstance(version, bytes) else str(version)
    except Exception as exc:  # noqa: BLE001
        env.unavailable["driver_version"] = msg("nvml_error", error=error(exc))
    try:
        handle, env.device_uuid = nvml_handle(pynvml, index)
        enabled = int(getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1))
        return is_mig_uuid(env.device_uuid) or int(pynvml.nvmlDeviceGetMigMode(handle)[0]) == enabled
    except Exception:  # noqa: BLE001 - NOT_SUPPORTED on GPUs without MIG: then only the name tells
        return False
    finally:
        close_nvml(pynvml)


def _uuid(index: int) -> str | None:
    """CUDA's UUID in NVML's spelling, without asking NVML (a MIG instance's CUDA UUID is its MIG UUID); None where
    the driver will not say: describing the machine must not cost the run (this path has not yet run on a GPU)."""
    try:
        return ("MIG-" if is_mig_name(torch.cuda.get_device_name(index)) else "GPU-") + cuda_uuid(index)
    except Exception:  # noqa: BLE001 - an old torch without props.uuid, a driver that refuses
        return None


def _datasheet(env: Environment, sm_count: int | None, mig: bool) -> None:
    """The datasheet peak of what this process can use: the whole GPU, or its MIG slice's SM share of it."""
    peak = datasheet_peak(env.device_name)
    if peak is None:
        env.unavailable["datasheet_peaks_tflops"] = msg("no_datasheet_entry", device=env.device_name)
        return
    scaled, reason = slice_peak(peak, sm_count, mig=mig)
    if scaled is None:
        env.unavailable["datasheet_peaks_tflops"] = reason or msg("no_datasheet_peak")
        return
    env.datasheet_peaks_tflops = dict(scaled.tflops)
    env.datasheet_source = f"{scaled.name}: {scaled.source}"


def collect_environment(device: str, *, device_index: int = 0, measure_ceiling: bool = True,
                        cache_ceiling: bool | None = None) -> Environment:
    """Describe this machine for ``device`` ('cpu' or 'cuda'); on CUDA the device the run uses (``device_index``,
    a CUDA index) and the list of all visible devices; optionally measure matmul ceilings (on that device).
    A CPU's ceilings come from perfscope.measure.ceiling_cache unless ``cache_ceiling`` is False (None: the
    PERFSCOPE_CEILING_CACHE environment variable decides, on by default)."""
    cpu_model, no_cpu_model = _cpu_model()
    env = Environment(
        device_type=device,
        device_name=(cpu_model or f"CPU ({platform.machine() or 'unknown'})") if device == "cpu"
        else torch.cuda.get_device_name(device_index),
        torch_version=torch.__version__,
        python_version=sys.version.split()[0],
        platform=platform.platform(),
        cpu_model=cpu_model,
        cpu_cores_physical=psutil.cpu_count(logical=False),
        cpu_cores_logical=psutil.cpu_count(logical=True),
        host_memory_bytes=psutil.virtual_memory().total,
        hostname=socket.gethostname(),
    )
    env.cpu_cores_usable, env.cpu_cores_usable_how = usable_cores()
    env.numa_nodes, no_numa = numa_nodes()
    if no_numa:
        env.unavailable["numa_nodes"] = no_numa
    if no_cpu_model:
        env.unavailable["cpu_model"] = no_cpu_model
    if device == "cuda":
        props = torch.cuda.get_device_properties(device_index)
        env.device_count = torch.cuda.device_count()
        env.device_index = device_index
        env.visible_devices = [f"{torch.cuda.get_device_name(i)} ({_uuid(i) or 'uuid unknown'})"
                               for i in range(env.device_count)]
        env.compute_capability = f"{props.major}.{props.minor}"
        env.device_memory_bytes = int(props.total_memory)
        env.multiprocessor_count = getattr(props, "multi_processor_count", None)
        env.cuda_version = torch.version.cuda  # the CUDA this PyTorch was built with (None: a ROCm build)
        # A MIG slice: CUDA names it after its profile, NVML gives it a MIG UUID, or its GPU has MIG mode on.
        env.mig = _nvml_facts(env, device_index) or is_mig_name(env.device_name)
        env.device_uuid = env.device_uuid or _uuid(device_index)
        _datasheet(env, env.multiprocessor_count, env.mig)
    else:
        env.unavailable["datasheet_peaks_tflops"] = msg("cpu_no_datasheet_peak")
    if measure_ceiling:
        _measure_ceilings(env, device, device_index, cache_ceiling)
    explain_missing(env)
    return env


def _measure_ceilings(env: Environment, device: str, device_index: int, cache: bool | None) -> None:
    """Matmul ceilings per dtype on the run's device (torch.cuda.device makes it current for the matmuls), and
    ``measured_ceiling_how``: measured in this run, or when a CPU's cached reading was measured."""
    dtypes = ceiling_dtypes(device)
    if device == "cpu":
        keys = {dtype: ceiling_key(dtype, env.cpu_model, env.cpu_cores_usable) for dtype in dtypes}
        got = cached_ceilings(keys, lambda dtype: measure_matmul_tflops("cpu", dtype), enabled=cache)
    else:
        with torch.cuda.device(device_index):
            got = measure_each(dtypes, lambda dtype: measure_matmul_tflops(device, dtype))
    env.measured_ceiling_tflops.update({dtype: round(tflops, 4) for dtype, tflops in got.tflops.items()})
    env.unavailable.update({f"measured_ceiling_tflops.{dtype}": msg("exception", error=why) for dtype, why in got.errors.items()})
    env.measured_ceiling_how = got.how


_REASON_KEY = {"datasheet_source": "datasheet_peaks_tflops"}
"""Fields whose absence is explained under another field's name."""
_CUDA_ONLY = frozenset({"device_index", "device_uuid", "multiprocessor_count", "compute_capability", "driver_version",
                        "cuda_version"})


def explain_missing(env: Environment) -> None:
    """Every field left null gets its reason in ``unavailable``: a reader (and the CI gate) can tell "not
    measured, because ..." from a value, and nothing is ever filled in with a plausible-looking default."""
    for f in dataclasses.fields(env):
        if getattr(env, f.name) is not None or _REASON_KEY.get(f.name, f.name) in env.unavailable:
            continue
        if f.name in _CUDA_ONLY and env.device_type == "cpu":
            why = msg("cpu_not_applicable")
        elif f.name == "cuda_version":
            hip = getattr(torch.version, "hip", None)
            why = msg("rocm_build", hip=hip) if hip else msg("no_cuda_build")
        elif f.name.startswith(("cpu_cores", "host_memory")):
            why = msg("psutil_cannot_read")
        elif f.name == "device_memory_bytes" and env.device_type == "cpu":
            why = msg("cpu_host_memory")
        else:
            why = msg("not_reported")
        env.unavailable[f.name] = why

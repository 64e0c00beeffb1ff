"""Which NVML device is CUDA device i? Found by UUID, never by index. Design notes: docs/measurement.md."""

from __future__ import annotations

from typing import Any

import torch

NVML_UUID_PREFIXES = ("GPU-", "MIG-")


def current_cuda_index() -> int:
    """The CUDA device this process's "cuda" means: a data-parallel rank's, set from its LOCAL_RANK by
    torch.cuda.set_device (perfscope.trial.data_parallel). Never a blanket 0: every rank would sample GPU 0."""
    return int(torch.cuda.current_device())


def cuda_uuid(index: int) -> str:
    """The UUID CUDA reports for device ``index``, without NVML's prefix."""
    raw = str(torch.cuda.get_device_properties(index).uuid)
    for prefix in NVML_UUID_PREFIXES:
        raw = raw.removeprefix(prefix)
    return raw


def nvml_uuid_candidates(uuid: str) -> list[str]:
    """NVML spellings of a CUDA UUID: the whole GPU first, then a MIG compute instance."""
    if uuid.startswith(NVML_UUID_PREFIXES):
        return [uuid]
    return [f"{prefix}{uuid}" for prefix in NVML_UUID_PREFIXES]


def nvml_handle(pynvml: Any, index: int) -> tuple[Any, str]:
    """(NVML handle, NVML UUID) of CUDA device ``index``; LookupError (with the UUID tried) when NVML has none."""
    uuid = cuda_uuid(index)
    errors = []
    for candidate in nvml_uuid_candidates(uuid):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(candidate), candidate
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotFound and friends: try the next spelling
            errors.append(f"{candidate}: {type(exc).__name__}: {exc}")
    raise LookupError(f"NVML knows no device with the UUID of CUDA device {index} ({'; '.join(errors)})")


def is_mig_uuid(nvml_uuid: str | None) -> bool:
    return bool(nvml_uuid) and nvml_uuid.startswith("MIG-")  # type: ignore[union-attr]

"""Which API turns matmul TF32 on, for the installed torch or the torch that made a run: the one decision.

Design notes: docs/internals.md."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from perfscope.versions import at_least

Setter = Literal["fp32_precision", "allow_tf32"]

NEW_API_SINCE = (2, 9)
"""First torch release with `torch.backends.cuda.matmul.fp32_precision` (PyTorch 2.9 CUDA notes); every release
since (2.9-2.13) also refuses legacy reads after the new setter alone."""
MIX_ISSUE = "https://github.com/pytorch/pytorch/issues/166387"


@dataclass(frozen=True)
class Tf32Api:
    """The setter to enable matmul TF32 with, and why that one (shown beside the code change)."""

    setter: Setter
    reason: str
    has_new_api: bool
    """Whether that torch has fp32_precision at all (the printed legacy line then says why not the new one)."""


LEGACY_ONLY = Tf32Api("allow_tf32", "this torch has no fp32_precision (torch < 2.9)", has_new_api=False)
MIXED_CHECK = Tf32Api(
    "allow_tf32",
    "this torch refuses legacy reads after fp32_precision alone, and torch.compile still makes them "
    f"({MIX_ISSUE}); allow_tf32 = True also sets fp32_precision, so every reader agrees", has_new_api=True)
NEW_ONLY = Tf32Api("fp32_precision", "legacy reads survive fp32_precision on this torch: the new API alone is safe",
                   has_new_api=True)


def tf32_api(torch_version: str | None = None) -> Tf32Api:
    """The API for the torch of ``torch_version`` (None, or the installed torch's version: probe this torch).

    A process that has not imported torch (`perfscope trace`, `perfscope report`: they only print the advice) decides
    from the version as for a recorded run, instead of importing torch (~1.5 s, ~300 MB) to probe it."""
    installed = installed_torch_version()
    version = torch_version or installed
    if version and (version != installed or sys.modules.get("torch") is None):
        newer = at_least(version, NEW_API_SINCE)
        if newer is not None:
            # Not this torch: no probe possible. Every release since 2.9 has the check (no later one lifts it yet).
            return MIXED_CHECK if newer else LEGACY_ONLY
    return probe_installed_torch()


def installed_torch_version() -> str | None:
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def probe_installed_torch() -> Tf32Api:
    """Feature probes of this torch, not its version string; cached: the answer cannot change in a process."""
    if not has_new_api():
        return LEGACY_ONLY
    return MIXED_CHECK if legacy_read_refused_after_new_setter() else NEW_ONLY


def has_new_api() -> bool:
    """True when this torch has `torch.backends.cuda.matmul.fp32_precision` (torch >= 2.9)."""
    import torch

    return _has_attr(torch.backends.cuda.matmul, "fp32_precision")


def legacy_read_refused_after_new_setter() -> bool:
    """Set the new API alone to disagree with the legacy state, try a legacy read, put every flag back.
    A process already in the mixed state answers without any change."""
    import torch

    snapshot = snapshot_matmul_tf32()
    if snapshot.legacy is None:
        return True  # torch already refuses: the user's file mixed the two APIs
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if snapshot.legacy == "highest" else "ieee"
        try:
            torch._C._get_cublas_allow_tf32()
        except RuntimeError:
            return True
        return False
    finally:
        restore_matmul_tf32(snapshot)


@dataclass(frozen=True)
class Tf32Snapshot:
    """Both matmul TF32 states: restoring only one of them can leave torch in the mixed state."""

    legacy: str | None
    """`torch.get_float32_matmul_precision()` ("highest" | "high" | "medium"); None when torch refuses the read."""
    new: tuple[tuple[str, str], ...] = ()
    """(backend, fp32_precision) of each backend's matmul setting the legacy setter writes (torch >= 2.9)."""


def snapshot_matmul_tf32() -> Tf32Snapshot:
    import torch

    try:
        legacy: str | None = torch._C._get_float32_matmul_precision()
    except RuntimeError:
        legacy = None
    return Tf32Snapshot(legacy, tuple((name, b.fp32_precision) for name, b in _new_api_matmul_backends(torch)))


def restore_matmul_tf32(snapshot: Tf32Snapshot) -> None:
    """Legacy first, then the new values: the legacy setter also writes the new states, never the reverse."""
    import torch

    if snapshot.legacy is not None:
        torch._C._set_float32_matmul_precision(snapshot.legacy)
    backends = dict(_new_api_matmul_backends(torch))
    if snapshot.legacy is None and backends:
        # Torch refused the legacy read: its legacy half is the opposite of the matmul's new state. Recreate it.
        new = dict(snapshot.new).get("cuda")
        torch._C._set_float32_matmul_precision("highest" if new == "tf32" else "high")
    for name, value in snapshot.new:
        backends[name].fp32_precision = value


def set_matmul_tf32(enabled: bool) -> None:
    """Switch TF32 for fp32 matmuls through the setter tf32_api() picks: on torch 2.9-2.13 the legacy one, which
    writes both states (the new one alone makes torch.compile's own legacy reads raise, pytorch#166387). Torch-free
    at import, so that the tf32 knob (perfscope.knobs.tf32) applies itself without the measure layer."""
    import torch

    if tf32_api().setter == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled


def _new_api_matmul_backends(torch) -> list[tuple[str, object]]:  # type: ignore[no-untyped-def]
    """The per-backend matmul settings that `set_float32_matmul_precision` writes (none before torch 2.9)."""
    found = []
    for name, module in (("cuda", torch.backends.cuda), ("mkldnn", getattr(torch.backends, "mkldnn", None))):
        matmul = getattr(module, "matmul", None)
        if matmul is not None and _has_attr(matmul, "fp32_precision"):
            found.append((name, matmul))
    return found


def _has_attr(obj: object, name: str) -> bool:
    try:
        getattr(obj, name)
    except (AttributeError, RuntimeError):
        return False
    return True


@dataclass(frozen=True)
class MatmulTf32:
    """The matmul TF32 state: enabled is None when torch itself refuses to tell (then `reason` says why)."""

    enabled: bool | None
    source: str
    """Which setting decided it, e.g. 'torch.backends.cuda.matmul.fp32_precision == "tf32"'."""
    reason: str | None = None


def matmul_tf32() -> MatmulTf32:
    """The current matmul TF32 state, on every torch >= 2.3; never raises; here so
    that the tf32 knob records it at the end of a trial's window (`Knob.record`) without the measure layer."""
    import torch

    matmul = torch.backends.cuda.matmul
    if has_new_api():
        try:
            precision = matmul.fp32_precision
        except RuntimeError:  # pragma: no cover - not seen in torch 2.9-2.13; the legacy read below decides
            precision = "none"
        if precision == "tf32":
            return MatmulTf32(True, 'torch.backends.cuda.matmul.fp32_precision == "tf32"')
        if precision == "ieee":
            return MatmulTf32(False, 'torch.backends.cuda.matmul.fp32_precision == "ieee"')
        # "none": inherits the generic setting, i.e. the legacy flag / set_float32_matmul_precision.
    try:
        enabled = bool(matmul.allow_tf32)
    except RuntimeError as exc:  # a mix of the legacy and new APIs: torch refuses to resolve it
        first = str(exc).split(",")[0]
        return MatmulTf32(None, "torch.backends.cuda.matmul.allow_tf32", reason=f"torch cannot tell: {first}")
    return MatmulTf32(enabled, "torch.backends.cuda.matmul.allow_tf32")

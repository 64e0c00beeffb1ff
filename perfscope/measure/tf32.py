"""Matmul TF32: read it without ever raising, set it with the API this torch wants, recommend the right code.

    state = matmul_tf32()                 # MatmulTf32(enabled=True, source='...fp32_precision == "tf32"')
    set_matmul_tf32(True)                 # fp32_precision = "tf32" on torch >= 2.9, allow_tf32 = True before
    with matmul_tf32_as(False): ...       # save, set, restore (snapshot_matmul_tf32 / restore_matmul_tf32)
    enable_tf32_code("2.13.0")            # the line a report recommends for that torch version

Why a module of its own: torch 2.9 added `torch.backends.cuda.matmul.fp32_precision` ("ieee" | "tf32" |
"none" = inherit) and deprecated `allow_tf32`; once a program has used the new API, *reading* the old flag
raises RuntimeError ("you have used mix of the legacy and new APIs"). A profiler that reads the old flag
therefore crashes on exactly the programs that follow torch's current advice. Only the cuBLAS matmul
setting is touched here: cuDNN's TF32 (convolutions) is on by default and perfscope leaves it to the
user, so a convnet baseline runs as the user's loop does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

NEW_API_SINCE = (2, 9)
"""First torch release with `torch.backends.cuda.matmul.fp32_precision` (PyTorch 2.9 CUDA notes)."""
NEW_API_CODE = 'torch.backends.cuda.matmul.fp32_precision = "tf32"'
OLD_API_CODE = "torch.backends.cuda.matmul.allow_tf32 = True"
REFERENCE = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"


@dataclass(frozen=True)
class MatmulTf32:
    """The matmul TF32 state: enabled is None when torch itself refuses to tell (then `reason` says why)."""

    enabled: bool | None
    source: str
    """Which setting decided it, e.g. 'torch.backends.cuda.matmul.fp32_precision == "tf32"'."""
    reason: str | None = None


def has_new_api() -> bool:
    """True when this torch has `torch.backends.cuda.matmul.fp32_precision` (torch >= 2.9)."""
    try:
        torch.backends.cuda.matmul.fp32_precision  # noqa: B018 - an attribute probe
    except (AttributeError, RuntimeError):
        return False
    return True


def matmul_tf32() -> MatmulTf32:
    """The current matmul TF32 state, on every torch >= 2.3; never raises."""
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


def matmul_tf32_enabled() -> bool | None:
    """Shorthand: True, False, or None when unknown."""
    return matmul_tf32().enabled


def set_matmul_tf32(enabled: bool) -> None:
    """Switch TF32 for fp32 matmuls with the new API where it exists (never mixing in the legacy flag)."""
    if has_new_api():
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled


def apply_matmul_tf32(setting: bool | None) -> bool | None:
    """A trial's TrialConfig.tf32: True/False set it; None leaves the user's (or torch's) setting alone.
    Returns the state the trial runs with — for the baseline, the setting the user's file made."""
    if setting is not None:
        set_matmul_tf32(setting)
    return matmul_tf32_enabled()


@dataclass(frozen=True)
class Tf32Snapshot:
    """A saved matmul TF32 setting, in the API it was read from (restoring through the other API would
    leave torch in the "mix of legacy and new APIs" state in which reads raise)."""

    api: str  # "fp32_precision" | "allow_tf32"
    value: str | bool


def snapshot_matmul_tf32() -> Tf32Snapshot:
    matmul = torch.backends.cuda.matmul
    if has_new_api():
        return Tf32Snapshot("fp32_precision", matmul.fp32_precision)
    return Tf32Snapshot("allow_tf32", bool(matmul.allow_tf32))


def restore_matmul_tf32(snapshot: Tf32Snapshot) -> None:
    setattr(torch.backends.cuda.matmul, snapshot.api, snapshot.value)


@contextmanager
def matmul_tf32_as(enabled: bool) -> Iterator[None]:
    """Set matmul TF32 for a block and restore the previous setting afterwards."""
    snapshot = snapshot_matmul_tf32()
    set_matmul_tf32(enabled)
    try:
        yield
    finally:
        restore_matmul_tf32(snapshot)


def torch_has_new_api(torch_version: str | None) -> bool:
    """Whether the torch that made a run (its recorded version string) has the new API; None = this torch."""
    if not torch_version:
        return has_new_api()
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    if match is None:
        return has_new_api()
    return (int(match.group(1)), int(match.group(2))) >= NEW_API_SINCE


def enable_tf32_code(torch_version: str | None = None) -> str:
    """The diff line that turns matmul TF32 on, in the API of that torch version (None: this torch)."""
    if torch_has_new_api(torch_version):
        return f"+{NEW_API_CODE}"
    return f"+{OLD_API_CODE}"

"""Matmul TF32: read it without ever raising, set it with the API this torch wants.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from perfscope.tf32_api import (
    MatmulTf32,
    Tf32Snapshot,
    has_new_api,
    matmul_tf32,
    restore_matmul_tf32,
    set_matmul_tf32,
    snapshot_matmul_tf32,
)

__all__ = ["MatmulTf32", "Tf32Snapshot", "apply_matmul_tf32", "has_new_api", "matmul_tf32", "matmul_tf32_as",
           "matmul_tf32_enabled", "restore_matmul_tf32", "set_matmul_tf32", "snapshot_matmul_tf32"]


def matmul_tf32_enabled() -> bool | None:
    """Shorthand: True, False, or None when unknown."""
    return matmul_tf32().enabled


def apply_matmul_tf32(setting: bool | None) -> bool | None:
    """A trial's TrialConfig.tf32: True/False set it; None leaves the user's (or torch's) setting alone.
    Returns the state the trial runs with — for the baseline, the setting the user's file made."""
    if setting is not None:
        set_matmul_tf32(setting)
    return matmul_tf32_enabled()


@contextmanager
def matmul_tf32_as(enabled: bool) -> Iterator[None]:
    """Set matmul TF32 for a block and restore the previous setting afterwards."""
    snapshot = snapshot_matmul_tf32()
    set_matmul_tf32(enabled)
    try:
        yield
    finally:
        restore_matmul_tf32(snapshot)

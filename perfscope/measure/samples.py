"""How many samples a batch holds: the first dimension of its first tensor. Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch


def leading_dim(batch: Any, _depth: int = 0) -> int | None:
    """The first dimension of the first tensor in a (nested) batch: its sample count, or None."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if _depth >= 4:
        return None
    if isinstance(batch, Mapping):
        items: Iterable[Any] = batch.values()
    elif isinstance(batch, list | tuple):
        items = batch
    else:
        return None
    for item in items:
        n = leading_dim(item, _depth + 1)
        if n is not None:
            return n
    return None

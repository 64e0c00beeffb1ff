"""A function over every tensor of a (nested) batch: how channels_last converts its inputs, and how the trial
moves a batch to its device or selects a pipeline micro-batch's rows (perfscope.trial.data re-uses it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``fn`` applied to every tensor of a (nested) batch: tensors, dicts, lists, tuples and named tuples."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: map_tensors(v, fn) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        items = [map_tensors(v, fn) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch

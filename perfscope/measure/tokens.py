"""FLOPs per step when the sequence length varies from batch to batch (dynamic padding).

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_leaves

from perfscope.measure.lazy_msg import msg

if TYPE_CHECKING:
    from perfscope.results.messages import Message


def batch_tokens(batch: Any) -> int | None:
    """Token positions a batch makes the model compute: the elements of its first integer tensor of rank ≥ 2
    (token ids, batch × padded length); None when it has none (images, features: no sequence to vary)."""
    for leaf in tree_leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.dim() >= 2 and not leaf.is_floating_point() and not leaf.is_complex() \
                and leaf.dtype != torch.bool:
            return int(leaf.numel())
    return None


@dataclass
class TokenTally:
    """Token positions of each micro-batch of the timed window (None entries: a batch without token ids)."""

    per_batch: list[int | None] = field(default_factory=list)

    def add(self, batch: Any) -> None:
        self.per_batch.append(batch_tokens(batch))

    @property
    def varies(self) -> bool:
        known = [n for n in self.per_batch if n is not None]
        return len(known) == len(self.per_batch) and len(set(known)) > 1

    @property
    def mean(self) -> float:
        known = [n for n in self.per_batch if n is not None]
        return sum(known) / len(known) if known else 0.0


@dataclass(frozen=True)
class TokenScale:
    factor: float
    """Multiplies the counted batch's FLOPs: the window's mean tokens per micro-batch / the counted batch's."""
    note: Message
    """How the count was scaled (a FLOP note)."""


def per_token_scale(counted_batch: Any, tally: TokenTally | None) -> TokenScale | None:
    """The counted batch's FLOPs → the window's mean micro-batch, when the window's token counts varied; None when
    every batch had the same shape (the counted batch is then exact) or tokens cannot be told."""
    counted = batch_tokens(counted_batch)
    if tally is None or not tally.varies or not counted:
        return None
    known = [n for n in tally.per_batch if n is not None]
    factor = tally.mean / counted
    return TokenScale(factor=factor, note=msg("flops_per_token", low=min(known), high=max(known), mean=tally.mean,
                                              counted=counted, tokens=sum(known), batches=len(known)))


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

"""The Dataset's own cost: a short profiled pass over N samples in the trial process (no DataLoader workers).

    profile = trial.metrics.dataset_profile       # DatasetProfile, or None when the step did not wait for data
    profile.batch_s, profile.batch_one_thread_s   # one batch's cost on the main process's threads / on one thread
    profile.top[0].function, profile.top[0].self_share

Design notes: docs/results.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from perfscope.results.constraints import FRACTION, NAME, NON_NEGATIVE, SECONDS, rule

__all__ = ["DatasetProfile", "ProfiledFunction"]

MAX_FUNCTIONS = 50
PROFILE_AT_DATA_WAIT = 0.10
"""The trial profiles the Dataset when at least this share of the step waited for data; the data-loader rule fires
from the same share (its default threshold)."""


@dataclass(kw_only=True)
class ProfiledFunction:
    """One function of the profiled pass (cProfile), summed over every profiled sample and batch."""

    function: str = field(metadata=NAME)
    """Where it lives, pstats-style: "cpu_heavy_dataset.py:24(__getitem__)", "{built-in method torch.fft.irfft2}"."""
    calls: int = field(metadata=NON_NEGATIVE)
    self_s: float = field(metadata=SECONDS)
    """Time in the function itself (cProfile's tottime), over the whole pass."""
    cumulative_s: float = field(metadata=SECONDS)
    """Time in the function and everything it called (cumtime)."""
    self_share: float = field(metadata=FRACTION)
    """self_s / the pass's total profiled time: where the Dataset's time goes."""

    @property
    def label(self) -> str:
        """For a reader: "torch._C._fft.fft_irfft2", "__getitem__ (cpu_heavy_dataset.py:24)"."""
        name = self.function
        if name.startswith("{") and name.endswith("}"):
            inner = name[1:-1]
            method = re.fullmatch(r"method '(\w+)' of '([\w.]+)' objects", inner)
            return f"{method.group(2)}.{method.group(1)}" if method else inner.removeprefix("built-in method ")
        where, _, rest = name.partition("(")
        return f"{rest.rstrip(')')} ({where})" if rest else name


@dataclass(kw_only=True)
class DatasetProfile:
    """What one sample and one batch of the user's Dataset cost in the trial process, and where that time goes."""

    kind: Literal["map", "iterable"]
    samples: int = field(metadata=NON_NEGATIVE)
    """Samples loaded in each pass (fewer than asked when the time budget ran out or the Dataset is short)."""
    batch_size: int = field(metadata=NON_NEGATIVE)
    getitem_s: float = field(metadata=SECONDS)
    """Wall time per sample (``dataset[i]``, or ``next()`` of an IterableDataset), unprofiled, on the trial
    process's torch threads: what the main process pays with num_workers=0."""
    threads: int = field(metadata=NON_NEGATIVE)
    """torch intra-op threads during that pass."""
    getitem_one_thread_s: float | None = field(default=None, metadata=SECONDS)
    """The same, with torch.set_num_threads(1): what a DataLoader worker pays (workers run one torch thread)."""
    collate_s: float | None = field(default=None, metadata=SECONDS)
    """Wall time of the collate function per batch of ``batch_size`` samples (None: fewer samples than a batch)."""
    profiled_s: float = field(default=0.0, metadata=SECONDS)
    """Total time under cProfile (its overhead included: the shares are what it is for, not the times)."""
    top: list[ProfiledFunction] = field(default_factory=list, metadata=rule(max_len=MAX_FUNCTIONS))
    """The functions with the most self time, largest first (the profiler's own bookkeeping left out)."""
    method: str = ""

    @property
    def batch_s(self) -> float:
        """One batch's loading cost in the main process: samples × per-sample cost + collate."""
        return self.getitem_s * self.batch_size + (self.collate_s or 0.0)

    @property
    def batch_one_thread_s(self) -> float | None:
        """One batch's loading cost in a DataLoader worker (one torch thread); None when not measured."""
        if self.getitem_one_thread_s is None:
            return None
        return self.getitem_one_thread_s * self.batch_size + (self.collate_s or 0.0)

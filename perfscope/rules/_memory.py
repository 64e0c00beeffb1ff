"""What holds a profiled step's memory peak, read for its fix, and how far that peak is from the allocator's.

    peak_holder(m.memory_categories)        # "activation" → checkpointing; "optimizer_state" → 8-bit, Adafactor,
                                            # ZeRO-1; "weights" (parameters + gradients) → FSDP / ZeRO-3; None
    peak_agreement(m, cuda=True)            # PeakAgreement: the profiled peak against max_memory_allocated

Design notes: docs/rules.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import MEMORY_CATEGORY_NAMES, MemoryCategories, TrialMetrics
from perfscope.rules._text import pct, size

HOLDERS = {"activation": ("activation",), "optimizer_state": ("optimizer_state",), "weights": ("parameter", "gradient")}
"""The parts of a peak a memory fix frees: activations (checkpointing), optimizer state (a lean optimizer, ZeRO-1),
weights and their gradients (FSDP / ZeRO-2/3 shard both). Inputs, temporaries and autograd detail no such fix frees."""
AGREES = 0.75
"""A profiled peak at least this share of the allocator's peak (and at most its inverse) agrees with it."""


def peak_holder(held: MemoryCategories | None) -> str | None:
    """The part of HOLDERS holding the most bytes at the profiled peak; None when the run was not profiled by
    category or none of them holds any."""
    if held is None or not held.peak_bytes:
        return None
    sizes = {part: holder_bytes(held, part) for part in HOLDERS}
    part = max(sizes, key=sizes.__getitem__)
    return part if sizes[part] > 0 else None


def holder_bytes(held: MemoryCategories, part: str) -> int:
    return sum(held.at_peak.get(c, 0) for c in HOLDERS[part])


@dataclass(frozen=True)
class PeakAgreement:
    """The profiled step's peak beside the allocator's: ``agrees`` None when there is no allocator peak (CPU)."""

    agrees: bool | None
    text: str


def peak_agreement(m: TrialMetrics, *, cuda: bool) -> PeakAgreement | None:
    """The comparison for a run profiled by category (None otherwise): on CUDA against max_memory_allocated (the
    recorded peak), on a CPU said to have none."""
    held = m.memory_categories
    if held is None:
        return None
    profiled = f"a profiled step's tensors peaked at {size(held.peak_bytes)}, most of it {MEMORY_CATEGORY_NAMES.get(held.peak_category, held.peak_category)}"
    if not cuda or not m.peak_memory_bytes:
        return PeakAgreement(None, (
            f"{profiled}; no allocator peak to check it against (torch keeps none on a CPU: the run's peak is the "
            "process's RSS), so a peak outside the profiled step would go unseen"))
    ratio = held.peak_bytes / m.peak_memory_bytes
    agrees = AGREES <= ratio <= 1 / AGREES
    text = f"{profiled}, {pct(ratio)} of the allocator's peak ({size(m.peak_memory_bytes)}, max_memory_allocated)"
    if not agrees:
        text += ("; they disagree: the true peak lies outside the profiled step (the first step, an evaluation, a longer "
                 "batch) or in memory no tensor holds (workspaces, communication buffers), and its largest part may differ"
                 if ratio < AGREES else "; they disagree: the profiled step held more than the peak recorded before it (the profiler's own "
                 "allocations, or a reset of the allocator's peak)")
    return PeakAgreement(agrees, text)

"""Arithmetic on time intervals (start, end), in the trace's microseconds, on numpy columns. Design notes: docs/trace.md."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

Span = tuple[float, float]


class SpanArray(Sequence[Span]):
    """Spans held as two numpy columns, taken and given like a list of (start, end): what the interval arithmetic
    runs on (millions of kernels). ``+`` a list (or another SpanArray) joins them, unmerged. The values are the
    trace's own (no arithmetic but max/min), and sums are taken in order, as Python's sum() adds them (seqsum)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, *, merged: bool = False) -> None:
        self.starts, self.ends, self.merged = np.asarray(starts, float), np.asarray(ends, float), merged

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(self)[i]
        return (float(self.starts[i]), float(self.ends[i]))

    def __iter__(self) -> Iterator[Span]:
        return iter(zip(self.starts.tolist(), self.ends.tolist()))

    def __add__(self, other: Any) -> SpanArray:
        other = spans_of(other)
        return SpanArray(np.concatenate([self.starts, other.starts]), np.concatenate([self.ends, other.ends]))

    def __radd__(self, other: Any) -> SpanArray:
        return spans_of(other) + self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, SpanArray)) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"SpanArray({list(self)!r})"


def spans_of(spans: Sequence[Span]) -> SpanArray:
    """``spans`` (a list of (start, end), or a SpanArray) as a SpanArray."""
    if isinstance(spans, SpanArray):
        return spans
    return SpanArray(np.array([s for s, _ in spans], float), np.array([e for _, e in spans], float))


def merge(spans: Sequence[Span]) -> SpanArray:
    """Sorted, non-overlapping spans covering exactly the union of ``spans``."""
    spans = spans_of(spans)
    if spans.merged:
        return spans
    keep = spans.ends > spans.starts
    starts, ends = spans.starts[keep], spans.ends[keep]
    if not len(starts):
        return SpanArray(starts, ends, merged=True)
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return SpanArray(starts[first], reach[last], merged=True)


def length(spans: Sequence[Span]) -> float:
    """Total time covered by ``spans`` (overlaps counted once)."""
    merged = merge(spans)
    return seqsum(merged.ends - merged.starts)


def clip(spans: Sequence[Span], window: Span) -> SpanArray:
    """``spans`` cut to ``window``, empty pieces dropped."""
    spans = spans_of(spans)
    lo, hi = window
    s, e = np.maximum(spans.starts, lo), np.minimum(spans.ends, hi)
    keep = e > s
    return SpanArray(s[keep], e[keep])


def gaps(busy: Sequence[Span], window: Span) -> SpanArray:
    """The parts of ``window`` that no span of ``busy`` covers."""
    merged = merge(clip(busy, window))
    lo, hi = window
    cursors = np.r_[lo, np.maximum(lo, merged.ends)]
    nexts = np.r_[merged.starts, hi]
    keep = nexts > cursors
    keep[-1] = cursors[-1] < hi
    return SpanArray(cursors[keep], nexts[keep], merged=True)


def overlap(span: Span, merged: Sequence[Span]) -> float:
    """Time of ``span`` covered by ``merged`` (sorted and non-overlapping, as merge() returns)."""
    lo, hi = span
    merged = spans_of(merged)
    ms, me = merged.starts, merged.ends
    i = max(int(np.searchsorted(ms, lo, side="right")) - 1, 0)  # the last span starting at or before lo
    total = 0.0
    while i < len(ms) and ms[i] < hi:
        total += max(0.0, min(float(me[i]), hi) - max(float(ms[i]), lo))
        i += 1
    return total


def subtract(spans: Sequence[Span], remove: Sequence[Span]) -> SpanArray:
    """The union of ``spans`` minus the union of ``remove``: each positive-length part of a merged span of ``spans``
    inside a gap between the merged spans of ``remove``."""
    kept, removed = merge(spans), merge(remove)
    if not len(removed):
        return kept
    g_s, g_e = np.r_[-np.inf, removed.ends], np.r_[removed.starts, np.inf]  # what remove leaves, in order
    lo = np.searchsorted(g_e, kept.starts, side="right")  # the first gap ending after the span starts
    hi = np.searchsorted(g_s, kept.ends, side="left")  # past the last gap starting before it ends
    counts = np.maximum(hi - lo, 0)
    which = np.repeat(np.arange(len(kept)), counts)
    gap = np.repeat(lo, counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    s, e = np.maximum(kept.starts[which], g_s[gap]), np.minimum(kept.ends[which], g_e[gap])
    keep = e > s
    return SpanArray(s[keep], e[keep], merged=True)


def touches(lo: np.ndarray, hi: np.ndarray, merged: Sequence[Span]) -> np.ndarray:
    """overlap((lo, hi), merged) > 0 for each pair, exactly: some merged span starts before hi and ends after lo."""
    merged = spans_of(merged)
    if not len(merged) or not len(lo):
        return np.zeros(len(lo), bool)
    i = np.searchsorted(merged.ends, lo, side="right")  # the first span ending after lo
    inside = i < len(merged)
    out = np.zeros(len(lo), bool)
    out[inside] = (merged.starts[i[inside]] < hi[inside]) & (hi[inside] > lo[inside])
    return out


def overlaps(lo: np.ndarray, hi: np.ndarray, merged: Sequence[Span]) -> np.ndarray:
    """overlap((lo, hi), merged) for each pair (computed by overlap() where it is not 0)."""
    merged = spans_of(merged)
    out = np.zeros(len(lo))
    for k in np.flatnonzero(touches(lo, hi, merged)).tolist():
        out[k] = overlap((float(lo[k]), float(hi[k])), merged)
    return out


def seqsum(values: np.ndarray) -> float:
    """Sum in array order, as Python's sum() adds (numpy's own sum is pairwise and rounds differently)."""
    if not len(values):
        return 0.0
    return float(np.bincount(np.zeros(len(values), np.intp), weights=values, minlength=1)[0])

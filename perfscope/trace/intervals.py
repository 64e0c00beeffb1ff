"""Arithmetic on time intervals (start, end), in the trace's microseconds. Design notes: docs/trace.md."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

Span = tuple[float, float]


def merge(spans: list[Span]) -> list[Span]:
    """Sorted, non-overlapping spans covering exactly the union of ``spans``."""
    if isinstance(spans, SpanArray):
        return spans if spans.merged else SpanArray(*merge_arrays(spans.starts, spans.ends), merged=True)
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(spans: list[Span]) -> float:
    """Total time covered by ``spans`` (overlaps counted once)."""
    if isinstance(spans, SpanArray):
        merged = merge(spans)
        return seqsum(merged.ends - merged.starts)  # type: ignore[attr-defined]
    return sum(end - start for start, end in merge(spans))


def clip(spans: list[Span], window: Span) -> list[Span]:
    """``spans`` cut to ``window``, empty pieces dropped."""
    lo, hi = window
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def gaps(busy: list[Span], window: Span) -> list[Span]:
    """The parts of ``window`` that no span of ``busy`` covers."""
    out, cursor = [], window[0]
    for start, end in merge(clip(busy, window)):
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < window[1]:
        out.append((cursor, window[1]))
    return out


def overlap(span: Span, merged: list[Span]) -> float:
    """Time of ``span`` covered by ``merged`` (sorted and non-overlapping, as merge() returns)."""
    lo, hi = span
    i = bisect.bisect_right(merged, (lo, float("inf"))) - 1  # the last span starting at or before lo
    total = 0.0
    for start, end in merged[max(i, 0):]:
        if start >= hi:
            break
        total += max(0.0, min(end, hi) - max(start, lo))
    return total


def subtract(spans: list[Span], remove: list[Span]) -> list[Span]:
    """The union of ``spans`` minus the union of ``remove`` (one sweep over both)."""
    if isinstance(spans, SpanArray) or isinstance(remove, SpanArray):
        return _subtract_arrays(spans, remove)
    out: list[Span] = []
    removed = merge(remove)
    j = 0
    for start, end in merge(spans):
        while j < len(removed) and removed[j][1] <= start:
            j += 1
        cursor, k = start, j
        while k < len(removed) and removed[k][0] < end:
            if removed[k][0] > cursor:
                out.append((cursor, removed[k][0]))
            cursor = max(cursor, removed[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


# ------------------------------------------------------------------ the same arithmetic on numpy columns
# Spans as two float64 arrays (starts, ends). The values are the trace's own (no arithmetic but max/min), so a
# merge here gives exactly the spans merge() gives; sums are taken in the order Python's sum() takes them.

Spans = tuple[np.ndarray, np.ndarray]


class SpanArray(Sequence[Span]):
    """Spans held as two numpy columns that merge(), length(), subtract() take and give like lists: what the
    collectives-against-compute arithmetic of perfscope.trace.communication runs on for millions of kernels.
    ``+`` a list (or another SpanArray) joins them, unmerged."""

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
        s, e = _columns(other)
        return SpanArray(np.concatenate([self.starts, s]), np.concatenate([self.ends, e]))

    def __radd__(self, other: Any) -> SpanArray:
        s, e = _columns(other)
        return SpanArray(np.concatenate([s, self.starts]), np.concatenate([e, self.ends]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, SpanArray)) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"SpanArray({list(self)!r})"


def _columns(spans: Any) -> Spans:
    if isinstance(spans, SpanArray):
        return spans.starts, spans.ends
    return np.array([s for s, _ in spans], float), np.array([e for _, e in spans], float)


def _subtract_arrays(spans: Any, remove: Any) -> SpanArray:
    """subtract() on columns: the union of ``spans`` cut by the gaps between the merged ``remove`` spans (the same
    pieces the sweep gives: each positive-length part of a merged span outside every removed one)."""
    a_s, a_e = merge_arrays(*_columns(spans))
    r_s, r_e = merge_arrays(*_columns(remove))
    if not len(r_s):
        return SpanArray(a_s, a_e, merged=True)
    g_s, g_e = np.r_[-np.inf, r_e], np.r_[r_s, np.inf]  # what remove leaves, in order
    lo = np.searchsorted(g_e, a_s, side="right")  # the first gap ending after the span starts
    hi = np.searchsorted(g_s, a_e, side="left")  # past the last gap starting before it ends
    counts = np.maximum(hi - lo, 0)
    which = np.repeat(np.arange(len(a_s)), counts)
    gap = np.repeat(lo, counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    s, e = np.maximum(a_s[which], g_s[gap]), np.minimum(a_e[which], g_e[gap])
    keep = e > s
    return SpanArray(s[keep], e[keep], merged=True)


def merge_arrays(starts: np.ndarray, ends: np.ndarray) -> Spans:
    """merge() of spans given as arrays."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], reach[last]


def clip_arrays(starts: np.ndarray, ends: np.ndarray, window: Span) -> Spans:
    """clip() of spans given as arrays."""
    lo, hi = window
    s, e = np.maximum(starts, lo), np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def gaps_arrays(merged: Spans, window: Span) -> Spans:
    """gaps() of spans already merged (merge_arrays)."""
    s, e = clip_arrays(*merged, window)
    s, e = merge_arrays(s, e)
    lo, hi = window
    cursors = np.r_[lo, np.maximum(lo, e)] if len(e) else np.array([lo], float)
    nexts = np.r_[s, hi]
    keep = nexts > cursors
    keep[-1] = cursors[-1] < hi
    return cursors[keep], nexts[keep]


def touches(lo: np.ndarray, hi: np.ndarray, merged: list[Span]) -> np.ndarray:
    """overlap((lo, hi), merged) > 0 for each pair, exactly: some merged span starts before hi and ends after lo."""
    if not merged or not len(lo):
        return np.zeros(len(lo), bool)
    ms = np.array([s for s, _ in merged])
    me = np.array([e for _, e in merged])
    i = np.searchsorted(me, lo, side="right")  # the first span ending after lo
    inside = i < len(me)
    out = np.zeros(len(lo), bool)
    out[inside] = (ms[i[inside]] < hi[inside]) & (hi[inside] > lo[inside])
    return out


def overlaps(lo: np.ndarray, hi: np.ndarray, merged: list[Span]) -> np.ndarray:
    """overlap((lo, hi), merged) for each pair (computed by overlap() where it is not 0)."""
    out = np.zeros(len(lo))
    for k in np.flatnonzero(touches(lo, hi, merged)).tolist():
        out[k] = overlap((float(lo[k]), float(hi[k])), merged)
    return out


def overlap_arrays(span: Span, merged: Spans) -> float:
    """overlap() against merged spans given as arrays."""
    lo, hi = span
    ms, me = merged
    i = max(int(np.searchsorted(ms, lo, side="right")) - 1, 0)
    total = 0.0
    while i < len(ms) and ms[i] < hi:
        total += max(0.0, min(float(me[i]), hi) - max(float(ms[i]), lo))
        i += 1
    return total


def subtract_length(merged: Spans, remove: list[Span]) -> float:
    """length(subtract(spans, remove)) for spans already merged (merge_arrays), summed in the same order."""
    s, e = merged
    removed = merge(remove)
    hit = np.flatnonzero(touches(s, e, removed))
    if not len(hit):
        return seqsum(e - s)
    parts, at = [], 0
    for k in hit.tolist():
        parts.append(e[at:k] - s[at:k])
        pieces = subtract([(float(s[k]), float(e[k]))], removed)
        parts.append(np.array([b - a for a, b in pieces], float))
        at = k + 1
    parts.append(e[at:] - s[at:])
    return seqsum(np.concatenate(parts))


def seqsum(values: np.ndarray) -> float:
    """Sum in array order, as Python's sum() adds (numpy's own sum is pairwise and rounds differently)."""
    if not len(values):
        return 0.0
    return float(np.bincount(np.zeros(len(values), np.intp), weights=values, minlength=1)[0])

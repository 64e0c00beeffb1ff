"""Arithmetic on time intervals (start, end), in the trace's microseconds.

    merge([(0, 5), (3, 8), (10, 12)])          # [(0, 8), (10, 12)]
    gaps([(0, 8), (10, 12)], (0, 20))           # [(8, 10), (12, 20)]

Why merging comes first everywhere: trace spans nest and overlap — `aten::item` contains
`aten::_local_scalar_dense` contains `cudaStreamSynchronize`; kernels on two streams overlap — so any sum of
raw durations counts the same microsecond several times.
"""

from __future__ import annotations

import bisect

Span = tuple[float, float]


def merge(spans: list[Span]) -> list[Span]:
    """Sorted, non-overlapping spans covering exactly the union of ``spans``."""
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

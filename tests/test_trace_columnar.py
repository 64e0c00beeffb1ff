"""The columnar trace (perfscope.trace.table) and the numpy interval arithmetic give exactly what the per-event
Python they replaced gave: the same spans, the same sums to the last bit, the same enclosing ops."""

from __future__ import annotations

import bisect
import random

import numpy as np
import pytest

from perfscope.trace.events import Trace, TraceBuilder
from perfscope.trace.intervals import Span, SpanArray, clip, gaps, length, merge, overlap, overlaps, subtract, touches
from perfscope.trace.sync import _stack_walk, enclosing
from perfscope.trace.table import NONE
from perfscope.trace.window import find_steps


def build_trace(raw: list[dict]) -> Trace:
    """The Trace of hand-built events already in memory."""
    builder = TraceBuilder()
    builder.add_batch(raw)
    trace = builder.finish()
    find_steps(trace)
    return trace


def spans(rng: random.Random, n: int, *, grid: bool) -> list[Span]:
    """Random spans; on a grid, many share their ends (the ties a sweep must order)."""
    out = []
    for _ in range(n):
        s = rng.randrange(0, 200) / 2 if grid else rng.uniform(0, 100)
        out.append((s, s + (rng.randrange(0, 20) / 2 if grid else rng.expovariate(0.3))))
    return out


# The per-span Python the numpy arithmetic replaced, kept here as its reference.


def list_merge(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def list_length(spans: list[Span]) -> float:
    return sum(end - start for start, end in list_merge(spans))


def list_clip(spans: list[Span], window: Span) -> list[Span]:
    lo, hi = window
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def list_gaps(busy: list[Span], window: Span) -> list[Span]:
    out, cursor = [], window[0]
    for start, end in list_merge(list_clip(busy, window)):
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < window[1]:
        out.append((cursor, window[1]))
    return out


def list_overlap(span: Span, merged: list[Span]) -> float:
    lo, hi = span
    i = bisect.bisect_right(merged, (lo, float("inf"))) - 1
    total = 0.0
    for start, end in merged[max(i, 0):]:
        if start >= hi:
            break
        total += max(0.0, min(end, hi) - max(start, lo))
    return total


def list_subtract(spans: list[Span], remove: list[Span]) -> list[Span]:
    out: list[Span] = []
    removed, j = list_merge(remove), 0
    for start, end in list_merge(spans):
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


@pytest.mark.parametrize("seed", range(40))
def test_array_interval_arithmetic_equals_the_list_one(seed: int) -> None:
    rng = random.Random(seed)
    grid = seed % 2 == 0
    a, b = spans(rng, rng.randrange(0, 60), grid=grid), spans(rng, rng.randrange(0, 8), grid=grid)
    window = (10.0, 90.0)
    arr = SpanArray(np.array([s for s, _ in a], float), np.array([e for _, e in a], float))
    assert merge(arr) == list_merge(a) and merge(a) == list_merge(a)
    assert clip(arr, window) == list_clip(a, window) and gaps(arr, window) == list_gaps(a, window)
    assert subtract(merge(arr), b) == list_subtract(a, b) and subtract(b, merge(arr)) == list_subtract(b, a)
    assert length(subtract(arr, arr + b)) == list_length(list_subtract(a, a + b))
    assert length(arr) == list_length(a) and length(subtract(merge(arr), b)) == list_length(list_subtract(a, b))
    lo = np.array([s for s, _ in b], float)
    hi = np.array([e for _, e in b], float)
    m = list_merge(a)
    assert [overlap(x, merge(a)) for x in b] == [list_overlap(x, m) for x in b]
    assert touches(lo, hi, m).tolist() == [list_overlap(x, m) > 0 for x in b]
    assert overlaps(lo, hi, m).tolist() == [list_overlap(x, m) for x in b]


def nested(rng: random.Random, depth: int, start: float, end: float, out: list[tuple[float, float]]) -> None:
    """Properly nested spans (ops in ops), some of them zero-length or sharing an end with their parent."""
    t = start
    while t < end and depth:
        d = min(end - t, rng.choice([0.0, 1.0, 2.5, 7.0, 20.0]))
        out.append((t, t + d))
        nested(rng, depth - 1, t, t + d, out)
        t += d + rng.choice([0.0, 0.5, 3.0])


@pytest.mark.parametrize("seed", range(30))
def test_enclosing_equals_the_stack_walk(seed: int) -> None:
    rng = random.Random(seed)
    ops: list[tuple[float, float]] = []
    nested(rng, 4, 0.0, 200.0, ops)
    rng.shuffle(ops)
    trace = build_trace([{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": s, "dur": e - s, "pid": 1, "tid": 1}
                         for i, (s, e) in enumerate(ops)])
    t = trace.columns("cpu_ops")
    points = sorted((p, p + rng.choice([0.5, 1.0])) for p in (rng.uniform(0, 200) for _ in range(20)))
    p0, p1 = np.array([p for p, _ in points]), np.array([q for _, q in points])
    rows = np.arange(len(t))
    order = np.lexsort((-t.dur, t.ts))
    walked = [order[np.array(found, np.int64)].tolist() for found in _stack_walk(t.ts[order], t.end[order], p0, p1)]
    assert [found.tolist() for found in enclosing(t, rows, p0, p1)] == walked


def test_columns_and_event_views_agree() -> None:
    raw = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5, "pid": 7, "tid": "main",
         "args": {"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"], "External id": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "pid": 7, "tid": "main",
         "args": {"correlation": 11, "External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 9, "dur": 4, "pid": 0, "tid": 7,
         "args": {"correlation": 11, "External id": 3, "device": 0}},
        {"ph": "X", "cat": "kernel", "name": "early", "ts": 3, "dur": 1, "pid": 0, "tid": 7, "args": {"correlation": 99}},
    ]
    trace = build_trace(raw)
    device = trace.columns("device")
    assert device.ts.tolist() == [3.0, 9.0]  # sorted by start
    assert device.linked.tolist() == [False, True] and device.launch_ts[1] == 2.0
    assert [e.name for e in trace.events("device")] == ["early", "gemm"]
    assert device.names[device.launch_name[1]] == "cudaLaunchKernel" and device.launch_name[0] == -1
    (op,) = trace.events("cpu_ops")
    assert op.args["Input Dims"] == [[4, 8], [8, 2]] and op.tid == "main"
    ops = trace.columns("cpu_ops")
    assert ops.ext.tolist() == [3] and ops.corr.tolist() == [NONE]
    assert trace.kernel_devices == {0: 2 - 1} and trace.complete_events == 4

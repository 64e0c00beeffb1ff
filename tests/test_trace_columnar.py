"""The columnar trace (perfscope.trace.table) and the numpy interval arithmetic give exactly what the per-event
Python they replaced gave: the same spans, the same sums to the last bit, the same enclosing ops."""

from __future__ import annotations

import random

import numpy as np
import pytest

from perfscope.trace.events import Trace, TraceBuilder
from perfscope.trace.intervals import (
    SpanArray,
    clip,
    clip_arrays,
    gaps,
    gaps_arrays,
    length,
    merge,
    merge_arrays,
    overlap,
    overlaps,
    subtract,
    subtract_length,
    touches,
)
from perfscope.trace.steps import find_steps
from perfscope.trace.sync import _stack_walk, enclosing


def build_trace(raw: list[dict]) -> Trace:
    """The Trace of hand-built events already in memory."""
    builder = TraceBuilder()
    builder.add_batch(raw)
    trace = builder.finish()
    find_steps(trace)
    return trace


def spans(rng: random.Random, n: int, *, grid: bool) -> list[tuple[float, float]]:
    """Random spans; on a grid, many share their ends (the ties a sweep must order)."""
    out = []
    for _ in range(n):
        s = rng.randrange(0, 200) / 2 if grid else rng.uniform(0, 100)
        out.append((s, s + (rng.randrange(0, 20) / 2 if grid else rng.expovariate(0.3))))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_array_interval_arithmetic_equals_the_list_one(seed: int) -> None:
    rng = random.Random(seed)
    grid = seed % 2 == 0
    a, b = spans(rng, rng.randrange(0, 60), grid=grid), spans(rng, rng.randrange(0, 8), grid=grid)
    window = (10.0, 90.0)
    cols = (np.array([s for s, _ in a], float), np.array([e for _, e in a], float))
    merged = merge_arrays(*cols)
    assert list(zip(*map(np.ndarray.tolist, merged))) == merge(a)
    assert list(zip(*map(np.ndarray.tolist, clip_arrays(*cols, window)))) == clip(a, window)
    assert list(zip(*map(np.ndarray.tolist, gaps_arrays(merged, window)))) == gaps(a, window)
    arr = SpanArray(*merged, merged=True)
    assert subtract(arr, b) == subtract(a, b) and subtract(b, arr) == subtract(b, a)
    assert length(subtract(arr, arr + b)) == length(subtract(a, a + b))
    assert length(arr) == length(a) and subtract_length(merged, b) == length(subtract(a, b))
    lo = np.array([s for s, _ in b], float)
    hi = np.array([e for _, e in b], float)
    m = merge(a)
    assert touches(lo, hi, m).tolist() == [overlap(x, m) > 0 for x in b]
    assert overlaps(lo, hi, m).tolist() == [overlap(x, m) for x in b]


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
    assert op.args["Input Dims"] == [[4, 8], [8, 2]] and op.external_id == 3
    assert op.tid == "main" and op.correlation is None
    assert trace.kernel_devices == {0: 2 - 1} and trace.complete_events == 4

"""Host ops: a CPU-only run's op self times (its launch-bound equivalent), and the hot matmuls by shape.

Design notes: docs/trace.md."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from perfscope.results.trace_facts import GemmShape, KernelFacts, LaunchFacts
from perfscope.trace.categories import categorize
from perfscope.trace.events import GEMM_OPS, Trace
from perfscope.trace.gpu import LAUNCH_BOUND_KERNELS, LAUNCH_BOUND_MEDIAN_US
from perfscope.trace.intervals import Span
from perfscope.trace.kernels import first_seen_sums, per_step, top_names
from perfscope.trace.table import NONE, EventColumns, last_match
from perfscope.trace.window import Window


def cpu_op_facts(trace: Trace, w: Window, data: list[Span] | None = None) -> tuple[KernelFacts, LaunchFacts]:
    """A CPU-only run: op self times by category, and the dispatch-bound equivalent of launch-bound.

    Ops inside the data spans are the Dataset's (__getitem__ and collate run in the loop's next() without
    workers): they are the data wait, not the step's compute, so they are left out."""
    data = data or []
    t = trace.columns("cpu_ops")
    keep = w.mask(t.ts)
    if data:
        starts = np.array([s for s, _ in data])
        ends = np.array([e for _, e in data])
        i = np.searchsorted(starts, t.ts, side="right") - 1
        keep &= ~((i >= 0) & (t.ts < ends[np.maximum(i, 0)]))
    rows = np.flatnonzero(keep)
    self_time, name = np.maximum(_self_times(t, rows), 0.0), t.name[rows]
    used, inverse = np.unique(name, return_inverse=True)
    labels: dict[str, int] = {}
    category = np.array([labels.setdefault(categorize(t.names[n]), len(labels)) for n in used.tolist()], np.int64)
    aten = np.array([t.names[n].startswith("aten::") for n in used.tolist()], bool)[inverse]
    launch = LaunchFacts(
        launch_bound=False,
        kernels_per_step=int(aten.sum()) / w.steps,
        median_kernel_us=float(np.median(self_time[aten])) if aten.any() else None,
        tiny_op_time_fraction=_tiny_time_fraction(list(zip([t.names[n] for n in name[aten].tolist()],
                                                           self_time[aten].tolist()))),
    )
    launch.launch_bound = bool(
        launch.kernels_per_step >= LAUNCH_BOUND_KERNELS
        and (launch.median_kernel_us or 0) < LAUNCH_BOUND_MEDIAN_US
        and (launch.tiny_op_time_fraction or 0) >= 0.5  # most op time in tiny ops, not in a few big matmuls
    )
    by_cat = first_seen_sums(category[inverse], self_time, list(labels))
    return KernelFacts(source="cpu ops", time_by_category=per_step(by_cat, w), top=top_names(t, name, self_time, w)), launch


def _tiny_time_fraction(ops: list[tuple[str, float]]) -> float | None:
    """Share of op time spent in ops whose typical self time is under the launch-bound threshold.
    Typical = median self time × calls per op name, so a few preempted calls on a loaded CPU cannot outweigh the rest."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, t in ops:
        by_name[name].append(t)
    typical = {name: (statistics.median(ts), len(ts)) for name, ts in by_name.items()}
    total = sum(m * n for m, n in typical.values())
    if not total:
        return None
    return sum(m * n for m, n in typical.values() if m < LAUNCH_BOUND_MEDIAN_US) / total


def _self_times(t: EventColumns, rows: np.ndarray) -> np.ndarray:
    """Self time of each op of ``rows`` (its duration minus its direct children's on the same thread)."""
    ts, dur, end, threads = t.ts[rows].tolist(), t.dur[rows].tolist(), t.end[rows].tolist(), t.thread()[rows].tolist()
    self_time = list(dur)
    by_thread: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(threads):
        by_thread[key].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (ts[i], -dur[i]))
        stack: list[int] = []
        for i in indices:
            while stack and end[stack[-1]] <= ts[i]:
                stack.pop()
            if stack:
                self_time[stack[-1]] -= dur[i]
            stack.append(i)
    return np.array(self_time, float)


def gemm_shapes(trace: Trace, w: Window, *, on_device: bool) -> list[GemmShape]:
    """Hot matmuls by (op, m×k×n, dtype) from recorded shapes, with their time per step: on a GPU the device
    time of the kernels they launched, on CPU the op's own duration."""
    t = trace.columns("cpu_ops")
    ops = np.flatnonzero(t.by_name(lambda n: n in GEMM_OPS) & w.mask(t.ts))
    times = _device_time_by_op(trace, ops) if on_device else t.dur[ops]
    shapes: dict[tuple[int, int], Any] = {}
    groups: dict[tuple[str, tuple[int, int, int], str], GemmShape] = {}
    index: dict[tuple[str, tuple[int, int, int], str], int] = {}
    of = np.full(len(ops), -1, np.int64)
    for k, (n, a) in enumerate(zip(t.name[ops].tolist(), t.args[ops].tolist())):
        mkn = shapes.get((n, a), False)
        if mkn is False:
            mkn = shapes[(n, a)] = _mkn(t.names[n], t.arg_table[a] if a >= 0 else {})
        if mkn is None:
            continue
        key = (t.names[n], *mkn)
        if key not in groups:
            groups[key] = GemmShape(op=t.names[n], shape=list(mkn[0]), dtype=mkn[1], count=0.0, time_s=0.0,
                                    time_source="kernels" if on_device else "cpu op")
            index[key] = len(index)
        of[k] = index[key]
    found = of >= 0
    counts = np.bincount(of[found], minlength=len(index))
    seconds = np.bincount(of[found], weights=times[found] / 1e6, minlength=len(index))
    for key, g in groups.items():
        g.count, g.time_s = float(counts[index[key]]), float(seconds[index[key]])
        multiple = 8 if any(s in g.dtype.lower() for s in ("half", "bfloat16", "bf16", "fp16")) else 4
        g.misaligned = [name for name, v in zip("mkn", g.shape) if v % multiple]
        g.count /= w.steps
        g.time_s /= w.steps
    return sorted(groups.values(), key=lambda g: -g.time_s)[:20]


def _device_time_by_op(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Device µs of the work each op launched (by position in ``ops``, rows of the op table): the op enclosing the
    launch call on its thread; for work with no linked launch, the op with the same "External id" (torch ≥ 2.4
    writes it)."""
    t, device = trace.columns("cpu_ops"), trace.columns("device")
    target = np.full(len(device), -1, np.int64)
    if not len(ops) or not len(device):
        return np.zeros(len(ops))
    threads, launch_threads = t.thread()[ops], device.launch_thread()
    linked = device.linked
    for key in np.unique(threads).tolist():
        mine = np.flatnonzero(threads == key)
        s, e = t.ts[ops][mine], t.end[ops][mine]
        order = np.lexsort((mine, e, s))
        s, e, mine = s[order], e[order], mine[order]
        work = np.flatnonzero(linked & (launch_threads == key))
        j = np.searchsorted(s, device.launch_ts[work], side="right") - 1
        ok = (j >= 0) & (e[np.maximum(j, 0)] >= device.launch_ts[work])
        target[work[ok]] = mine[j[ok]]
    work = np.flatnonzero(~linked & (device.ext != NONE))
    target[work] = last_match(t.ext[ops], device.ext[work])
    found = target >= 0
    return np.bincount(target[found], weights=device.dur[found], minlength=len(ops))


def _mkn(name: str, args: dict[str, Any]) -> tuple[tuple[int, int, int], str] | None:
    """(m, k, n) and the dtype of a matmul op from its recorded inputs, read by position: addmm/baddbmm are
    (bias, a, b, …), mm/bmm (a, b, …); the rest (beta, alpha, an `out=` buffer, as Inductor passes one) is not
    an operand. m folds the leading dims of a (bmm: batch × rows)."""
    dims = args.get("Input Dims") or []
    types = list(args.get("Input type") or []) + [""] * len(dims)
    first = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    if len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 2):
        return None
    return (math.prod(int(v) for v in a[:-1]), int(a[-1]), int(b[-1])), str(types[first])

"""Host synchronization: the runtime calls in which the host waited for the device, and where each was made.

Design notes: docs/trace.md."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from perfscope.results.trace_facts import SyncFacts
from perfscope.trace.events import Event, Trace, event_at, is_user_frame
from perfscope.trace.export import distributed_info, trace_file_name
from perfscope.trace.inputs import read_trace
from perfscope.trace.intervals import SpanArray, clip, length, merge
from perfscope.trace.table import EventColumns
from perfscope.trace.window import Window, window

SYNC_CALL = re.compile(r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize$|^(?:cudaMemcpy|hipMemcpy|hipMemcpyWithStream)$")
"""Runtime calls that block the host until the device has done: the synchronize family, and the blocking copy
APIs (torch's ROCm build copies to and from the host with hipMemcpyWithStream)."""


def sync_rows(trace: Trace, w: Window | None = None) -> np.ndarray:
    """Rows of the runtime table in which the host waited for the device (starting in the window, when given)."""
    t = trace.columns("runtime")
    rows = t.by_name(SYNC_CALL.match)
    if w is not None:
        rows &= w.mask(t.ts)
    return np.flatnonzero(rows)


def sync_facts(trace: Trace, w: Window) -> SyncFacts:
    """Host waits on the device per step, each attributed to the call site that made it: the ops enclosing the
    runtime call (`aten::to > aten::copy_` with the copy's direction, `aten::item > aten::_local_scalar_dense`)
    and, in a trace recorded with stacks, the innermost Python frame outside torch."""
    runtime = trace.columns("runtime")
    rows = sync_rows(trace, w)
    merged = merge(SpanArray(runtime.ts[rows], runtime.end[rows]))
    calls = [event_at(runtime, i) for i in rows.tolist()]
    device = trace.columns("device")
    memcpy = np.flatnonzero(device.by_cat("gpu_memcpy") & device.linked)
    copies = sorted(zip(device.launch_ts[memcpy].tolist(), [device.values[i] for i in device.launch_tid[memcpy].tolist()],
                        [device.names[i] for i in device.name[memcpy].tolist()]), key=lambda c: c[0])
    sites = Counter(_sync_site(copies, e, *context) for e, *context in _call_contexts(trace, rows, calls))
    return SyncFacts(
        points_per_step=len(merged) / w.steps,
        events_per_step={k: v / w.steps for k, v in Counter(e.name for e in calls).items()},
        blocked_fraction=min(1.0, length(merged) / w.total_us),
        sites={k: v / w.steps for k, v in sorted(sites.items(), key=lambda kv: -kv[1])},
    )


def blocked_spans(trace: Trace, w: Window) -> SpanArray:
    """Host time blocked on the device: synchronizing calls, and copies from or to pageable memory (the
    runtime stages them synchronously)."""
    runtime, device = trace.columns("runtime"), trace.columns("device")
    rows = sync_rows(trace)
    pageable = np.flatnonzero(device.linked & device.by_cat("gpu_memcpy") & device.by_name(lambda n: "Pageable" in n))
    spans = SpanArray(runtime.ts[rows], runtime.end[rows]) + SpanArray(
        device.launch_ts[pageable], (device.launch_ts + device.launch_dur)[pageable])
    return merge(clip(spans, w.bounds))


def _call_contexts(trace: Trace, rows: np.ndarray,
                   calls: list[Event]) -> list[tuple[Event, list[Event], list[Event], list[Event]]]:
    """Each call with the cpu ops, the record_function labels and the Python frames enclosing it on its thread,
    outermost first."""
    runtime = trace.columns("runtime")
    threads = runtime.thread()[rows]
    by_thread: dict[int, list[int]] = {}
    for k, key in enumerate(threads.tolist()):
        by_thread.setdefault(key, []).append(k)
    out = []
    for key, ks in by_thread.items():
        p0 = np.array([calls[k].ts for k in ks])
        p1 = np.array([calls[k].end for k in ks])
        chains = []
        for kind in ("cpu_ops", "annotations", "python"):
            t = trace.columns(kind)
            mine = np.flatnonzero(t.thread() == key)
            chains.append([[event_at(t, i) for i in mine[found].tolist()] for found in enclosing(t, mine, p0, p1)])
        out += [(calls[k], chains[0][n], chains[1][n], chains[2][n]) for n, k in enumerate(ks)]
    return out


def enclosing(t: EventColumns, rows: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> list[np.ndarray]:
    """For each point (p0[k], p1[k]), the spans of ``t[rows]`` (one thread) enclosing it, as indices into ``rows``
    in (start, longest first) order: outermost first."""
    s, d = t.ts[rows], t.dur[rows]
    order = np.lexsort((-d, s))
    s, e = s[order], t.end[rows][order]
    if len(p0) and (np.any(np.diff(p0) < 0) or np.any(p1 <= p0)):
        return [order[np.array(found, np.int64)] for found in _stack_walk(s, e, p0, p1)]
    dur = e - s
    bound = float(np.quantile(dur, 0.99)) if len(dur) else 0.0
    long = np.flatnonzero(dur > bound)
    out = []
    for a, b in zip(p0.tolist(), p1.tolist()):
        hi = int(np.searchsorted(s, a, side="right"))
        lo = int(np.searchsorted(s, a - bound - 1.0, side="left"))
        near = lo + np.flatnonzero(e[lo:hi] >= b)
        far = long[(long < lo) & (e[long] >= b)]
        out.append(order[np.concatenate([far, near])])
    return out


def _stack_walk(s: np.ndarray, e: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> list[list[int]]:
    stack: list[int] = []
    out, i = [], 0
    starts, ends = s.tolist(), e.tolist()
    for a, b in zip(p0.tolist(), p1.tolist()):
        while i < len(starts) and starts[i] <= a:
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            stack.append(i)
            i += 1
        out.append([j for j in stack if starts[j] <= a and ends[j] >= b])
    return out


def _sync_site(copies: list[tuple[float, Any, str]], call: Event, chain: list[Event], labels: list[Event],
               frames: list[Event]) -> str:
    ops = [e for e in chain if "::" in e.name]
    if not ops:
        site = f"{call.name} in {labels[-1].name}" if labels else f"{call.name} outside any op"
    else:
        site = op_name(ops[0]) if len(ops) == 1 else f"{op_name(ops[0])} > {ops[-1].name}"
        direction = _copy_direction(copies, ops[0])
        if direction:
            site += f" ({direction} copy)"
    user = [f for f in frames if is_user_frame(f.name)]
    return f"{site} at {user[-1].name}" if user else site


def op_name(name: str | Event) -> str:
    """An op as a reader knows it: autograd's `evaluate_function: AddmmBackward0` wrapper is the backward node."""
    name = name if isinstance(name, str) else name.name
    return name.removeprefix("autograd::engine::evaluate_function: ")


def _copy_direction(copies: list[tuple[float, Any, str]], op: Event) -> str | None:
    """HtoD / DtoH / DtoD when the op launched a memcpy (the copy its sync waited for); ``copies``: (launch time,
    launching thread, name) of every memcpy, sorted."""
    for ts, tid, name in copies[bisect.bisect_left(copies, op.ts, key=lambda c: c[0]):]:
        if ts > op.end:
            break
        if tid == op.tid:
            m = re.search(r"[HD]to[HD]", name)
            return m.group(0) if m else None
    return None


MORE_PER_STEP = 0.5
"""The least rise in waits per step at one call site that is named (one wait every other step)."""


def rank_trace(folder: Path) -> Path:
    """This rank's trace in a capture folder (rank<R>.json.gz, as TraceCapture names it)."""
    return folder / trace_file_name(distributed_info())


def capture_syncs(folder: Path) -> SyncFacts | None:
    """The host waits in this rank's trace in ``folder`` (without ProfilerStep#N spans: its whole span one step), or
    None when the capture wrote none."""
    path = rank_trace(folder)
    if not path.is_file():
        return None
    trace = read_trace(path)
    return sync_facts(trace, window(trace, 1))


def new_syncs(before: SyncFacts, after: SyncFacts) -> list[str]:
    """Each call site waiting at least MORE_PER_STEP more times per step in ``after``, most added first."""
    added = {site: n - before.sites.get(site, 0.0) for site, n in after.sites.items()}
    return [f"a new sync: {site} {after.sites[site]:.2g} per step (was {before.sites.get(site, 0.0):.2g})"
            for site, more in sorted(added.items(), key=lambda kv: -kv[1]) if more >= MORE_PER_STEP]

"""The GPU timeline: busy and idle time, what each idle gap waited for, and launch-boundness.

Design notes: docs/trace.md."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from perfscope.results.trace_facts import GpuTimeline, IdleBreakdown, LaunchFacts
from perfscope.trace.events import Trace
from perfscope.trace.intervals import Span, SpanArray, clip, gaps, length, merge, overlaps, seqsum, subtract, touches
from perfscope.trace.kernels import first_seen_sums
from perfscope.trace.sync import enclosing, op_name
from perfscope.trace.table import EventColumns
from perfscope.trace.window import Window

RUNTIME_LAUNCH = re.compile(r"cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|cudaGraphLaunch", re.I)
LAUNCH_BOUND_KERNELS, LAUNCH_BOUND_MEDIAN_US = 200, 20.0
STARVED_MIN_FRACTION = 0.10
"""Launch-bound needs the GPU idle, waiting for the host's launches, at least this share of the step."""
TOUCH_US = 2.0  # timestamps are µs with jitter: a blocking call ending this close to a gap touches it


@dataclass(frozen=True)
class IdleGaps:
    """The gaps in the GPU timeline (rows), each with the device work that ended it (``following``: its row in the
    device table, -1 for none); ``queued``: that work had been launched before the gap began, so the GPU waited on
    something other than the host (another stream, an event)."""

    start: np.ndarray
    end: np.ndarray
    following: np.ndarray
    queued: np.ndarray


def busy(device: EventColumns) -> SpanArray:
    """The union of every device work's span (every stream)."""
    return merge(SpanArray(device.ts, device.end))


def idle_gaps(trace: Trace, w: Window) -> IdleGaps:
    """The GPU's idle gaps in the window (no work on any stream), each with the work that ended it."""
    device = trace.columns("device")
    idle = gaps(busy(device), w.bounds)
    g0, g1 = idle.starts, idle.ends
    i = np.searchsorted(device.ts, g1 - 1e-6, side="left")
    following = np.where(i < len(device), i, -1)
    has = following >= 0
    f = np.where(has, following, 0)
    queued = np.zeros(len(g0), bool)
    if len(device):
        launch = device.launch_ts[f]
        queued = has & (~device.linked[f] | (launch < g0))
    return IdleGaps(g0, g1, following, queued)


def gpu_timeline(trace: Trace, w: Window, gaps: IdleGaps, *, data: list[Span], blocked: list[Span]) -> GpuTimeline:
    """GPU busy/idle share of the step and what each idle gap waited for."""
    busy_us = length(clip(busy(trace.columns("device")), w.bounds))
    host = ~gaps.queued
    g0, g1 = gaps.start[host], gaps.end[host]
    waited = overlaps(g0, g1, data)
    rest = g1 - g0 - waited
    sync = touches(g0 - TOUCH_US, g1, blocked)
    idle = {"data_wait": seqsum(waited), "sync": seqsum(rest[sync]), "host": seqsum(rest[~sync]),
            "other": seqsum(gaps.end[gaps.queued] - gaps.start[gaps.queued])}
    total = w.total_us
    per_step = {k: v / w.steps / 1e6 for k, v in idle.items()}
    return GpuTimeline(
        busy_fraction=min(1.0, busy_us / total), idle_fraction=max(0.0, 1.0 - busy_us / total), busy_s=busy_us / w.steps / 1e6,
        idle=IdleBreakdown(data_wait_s=per_step["data_wait"], sync_s=per_step["sync"], host_s=per_step["host"],
                           other_s=per_step["other"]),
    )


def idle_after_waits(gaps: IdleGaps, w: Window, waits: list[Span]) -> float:
    """GPU idle per step (s) in the gaps that opened while the host waited on the device: the wait drained the
    queue, so whatever the host did next (the next batch's loading included) ran with the GPU idle. This, not
    the time blocked, is what a wait costs: a GPU-bound loop blocks long on a `.item()` and loses nothing."""
    after = ~gaps.queued & touches(gaps.start - TOUCH_US, gaps.start + TOUCH_US, waits)
    return seqsum(gaps.end[after] - gaps.start[after]) / w.steps / 1e6


def starved_by(trace: Trace, gaps: IdleGaps, w: Window, *, data: list[Span], blocked: list[Span]) -> dict[str, float]:
    """GPU idle per step (s) waiting for the host, by the op (the 5 longest) that launched the work ending each gap (the
    outermost dispatcher op around the launch): what the host was doing while the GPU starved — thousands of
    tiny launches, or one slow host op (a foreach over CPU tensors, a flatten of DDP buffers)."""
    device, ops = trace.columns("device"), trace.columns("cpu_ops")
    f = np.where(gaps.following >= 0, gaps.following, 0)
    rows = np.flatnonzero(~gaps.queued & (gaps.following >= 0) & (device.linked[f] if len(device) else False)
                          & ~touches(gaps.start - TOUCH_US, gaps.end, blocked))
    if not len(rows):
        return {}
    work = f[rows]
    threads = device.launch_thread()[work]
    _, first = np.unique(threads, return_index=True)
    dispatcher = ops.by_name(lambda n: "::" in n)
    op_threads = ops.thread()
    order: list[np.ndarray] = []
    names: list[np.ndarray] = []
    for key in threads[np.sort(first)].tolist():
        mine = rows[threads == key]
        mine = mine[np.argsort(device.launch_ts[f[mine]], kind="stable")]
        p0 = device.launch_ts[f[mine]]
        p1 = p0 + device.launch_dur[f[mine]]
        names.append(_outermost(ops, np.flatnonzero(op_threads == key), dispatcher, p0, p1))
        order.append(mine)
    rows, name_ids = np.concatenate(order), np.concatenate(names)
    value = gaps.end[rows] - gaps.start[rows] - overlaps(gaps.start[rows], gaps.end[rows], data)
    labels: dict[str, int] = {}  # the op as a reader names it, first seen first (as a Counter keeps them)
    used, inverse = np.unique(name_ids, return_inverse=True)
    label_of = np.array([labels.setdefault("(no op)" if n < 0 else op_name(ops.names[n]), len(labels)) for n in used.tolist()])
    idle = Counter(first_seen_sums(label_of[inverse], value, list(labels)))
    return {name: us / w.steps / 1e6 for name, us in idle.most_common(5) if us > 0}


def _outermost(ops: EventColumns, thread: np.ndarray, dispatcher: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """For each point (sorted), the name id of the outermost dispatcher op (``dispatcher``: a mask of the op
    table) of the thread's ops (``thread``: rows) enclosing it; -1: none."""
    if np.any(p1 <= p0):  # a point with no duration: the stack walk over all the thread's ops decides
        found = [thread[x][dispatcher[thread[x]]] for x in enclosing(ops, thread, p0, p1)]
        return np.array([ops.name[x[0]] if len(x) else -1 for x in found], np.int64)
    rows = thread[dispatcher[thread]]
    if not len(rows):
        return np.full(len(p0), -1, np.int64)
    s, d = ops.ts[rows], ops.dur[rows]
    order = np.lexsort((-d, s))
    s, e = s[order], ops.end[rows][order]
    reach = np.maximum.accumulate(e)
    hi = np.searchsorted(s, p0, side="right")  # spans starting at or before the point
    j = np.searchsorted(reach, p1, side="left")  # the first span (in order) ending at or after the point's end
    ok = j < hi
    return np.where(ok, ops.name[rows[order[np.minimum(j, len(s) - 1)]]], -1).astype(np.int64)


def launch_facts(trace: Trace, work: np.ndarray, w: Window, timeline: GpuTimeline, *,
                 data: list[Span], blocked: list[Span]) -> LaunchFacts:
    """Is the GPU waiting for the host's launches? Only when it idles while the (unblocked) host is launching.
    ``work``: the device rows the window issued."""
    device, runtime, ops = trace.columns("device"), trace.columns("runtime"), trace.columns("cpu_ops")
    durations = device.dur[work[device.by_cat("kernel")[work]]]
    calls = np.flatnonzero(runtime.by_name(RUNTIME_LAUNCH.search) & w.mask(runtime.ts))
    counts = Counter(runtime.names[i] for i in runtime.name[calls].tolist())
    host_ops = clip(SpanArray(ops.ts, ops.end), w.bounds)
    facts = LaunchFacts(
        launch_bound=False,
        kernels_per_step=len(durations) / w.steps,
        median_kernel_us=float(np.median(durations)) if len(durations) else None,
        host_launch_s=seqsum(runtime.dur[calls]) / w.steps / 1e6,
        host_active_s=length(subtract(host_ops, blocked + data)) / w.steps / 1e6,
        starved_fraction=timeline.idle.host_s * 1e6 / w.step_us,
        launch_calls_per_step={k: v / w.steps for k, v in sorted(counts.items())},
    )
    facts.launch_bound = bool(
        facts.kernels_per_step >= LAUNCH_BOUND_KERNELS
        and (facts.median_kernel_us or 0) < LAUNCH_BOUND_MEDIAN_US
        and facts.starved_fraction >= STARVED_MIN_FRACTION
        and facts.host_active_s >= timeline.busy_s
    )
    return facts


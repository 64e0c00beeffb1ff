"""Chrome/Kineto trace → typed per-step facts (perfscope.results.trace_facts.TraceFacts).

    facts = trace_facts(Path("trials/baseline/trace/rank0.json.gz"), device_type="cuda", steps=3)
    facts.gpu.idle_fraction, facts.gpu.idle.sync_s, facts.kernels.time_by_category, facts.launch.launch_bound

One analyzer per fact family, each a function of the parsed trace (perfscope.trace.events) and the profiled
window: data wait, host synchronization, kernels by category, the GPU timeline and what its idle time waited
for, launch-boundness, pageable copies, host↔device traffic, GEMM shapes. Everything is per profiled step.

How the GPU facts are decided, and why:
- Device work belongs to the step whose host span LAUNCHED it (a GPU-bound step's kernels run after its host
  span ends); GPU busy time is the union of kernel/memcpy/memset intervals on every stream, clipped to the
  window, so overlapping streams are not counted twice.
- An idle gap on the GPU is caused by the host when the work that ends it was launched after the gap began.
  That time goes to the data wait where the host was inside a `perfscope::data` span, to sync where the host
  was blocked on the device (synchronizing calls, pageable copies: after one, the queue is empty), and the
  rest to the host itself (launch overhead and host work). A gap whose next work was already queued waited
  for something else (a cross-stream dependency): "other".
- Launch-bound needs all of: many short kernels (≥ 200 a step, median < 20 µs), the GPU starved by the host
  for ≥ 10% of the step, and the host's unblocked op time (syncs and data waits subtracted) at least the
  GPU's busy time. Many small kernels alone are common in GPU-bound steps.
- GEMM shape times are the device time of the kernels each matmul op launched, found through the launch's
  correlation id and the op that encloses the launch on its thread (host op durations are microseconds of
  launch overhead on CUDA).
On a CPU-only run the op times are self CPU times (ops inside the data spans, the Dataset's, left out), and the
launch-bound equivalent is a step of ≥ 200 aten ops with a median self time < 20 µs spending at least half of
its op time in such tiny ops (dispatch-bound).
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.results.trace_facts import (
    GemmShape,
    GpuTimeline,
    HostTransfers,
    IdleBreakdown,
    KernelFacts,
    KernelStat,
    LaunchFacts,
    PageableCopies,
    SyncFacts,
    TraceFacts,
)
from perfscope.trace.categories import categorize, gemm_on_tensor_cores
from perfscope.trace.events import GEMM_OPS, DeviceWork, Event, Trace, is_user_frame, read_trace
from perfscope.trace.intervals import Span, clip, gaps, length, merge, overlap, subtract

SYNC_CALL = re.compile(r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize$|^(?:cudaMemcpy|hipMemcpy|hipMemcpyWithStream)$")
"""Runtime calls that block the host until the device has done: the synchronize family, and the blocking copy
APIs (torch's ROCm build copies to and from the host with hipMemcpyWithStream)."""
RUNTIME_LAUNCH = re.compile(r"cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|cudaGraphLaunch", re.I)
DATA_LABEL = "perfscope::data"
LAUNCH_BOUND_KERNELS, LAUNCH_BOUND_MEDIAN_US = 200, 20.0
STARVED_MIN_FRACTION = 0.10
"""Launch-bound needs the GPU idle, waiting for the host's launches, at least this share of the step."""
TOUCH_US = 2.0  # timestamps are µs with jitter: a blocking call ending this close to a gap touches it


@dataclass(frozen=True)
class Window:
    """The profiled steps: where facts are read and what every per-step figure is divided by."""

    spans: list[Span]
    steps: int

    @property
    def bounds(self) -> Span:
        return (self.spans[0][0], self.spans[-1][1])

    @property
    def total_us(self) -> float:
        return sum(e - s for s, e in self.spans)

    @property
    def step_us(self) -> float:
        return self.total_us / self.steps

    def contains(self, t: float) -> bool:
        return self.bounds[0] <= t <= self.bounds[1]


def window(trace: Trace, steps: int) -> Window:
    """The ProfilerStep#N spans; without them, the whole host timeline split into ``steps`` steps."""
    if trace.steps:
        w = Window(spans=merge(trace.steps), steps=len(trace.steps))
    else:
        host = [e.span for e in trace.cpu_ops + trace.runtime + trace.annotations] or [x.event.span for x in trace.device]
        if not host:
            raise ValueError("the trace has no complete events")
        w = Window(spans=[(min(s for s, _ in host), max(e for _, e in host))], steps=max(steps, 1))
    if w.total_us <= 0:
        raise ValueError("the profiled window has no duration")
    return w


# ------------------------------------------------------------------------------------------- analyzers


def data_spans(trace: Trace, w: Window) -> list[Span]:
    """Host time inside perfscope::data spans: the loop's `next()` on the data iterator."""
    return merge(clip(trace.labelled(DATA_LABEL), w.bounds))


def sync_calls(trace: Trace, w: Window | None = None) -> list[Event]:
    """Runtime calls in which the host waited for the device (in the window, when given).

    Only the runtime says whether the host waited: `aten::item` on a CPU tensor (torch.optim's foreach AdamW
    reads its host-side step counters that way, about twice per parameter tensor) is no sync, and on a device
    tensor it is one only through the cudaStreamSynchronize inside it."""
    return [e for e in trace.runtime if SYNC_CALL.match(e.name) and (w is None or w.contains(e.ts))]


def sync_facts(trace: Trace, w: Window) -> SyncFacts:
    """Host waits on the device per step, each attributed to the call site that made it: the ops enclosing the
    runtime call (`aten::to > aten::copy_` with the copy's direction, `aten::item > aten::_local_scalar_dense`)
    and, in a trace recorded with stacks, the innermost Python frame outside torch."""
    calls = sync_calls(trace, w)
    merged = merge([e.span for e in calls])
    copies = sorted(((x.launch.ts, x.launch.tid, x.event.name) for x in trace.device
                     if x.event.cat == "gpu_memcpy" and x.launch is not None), key=lambda c: c[0])
    sites = Counter(_sync_site(copies, e, *context) for e, *context in _call_contexts(trace, calls))
    return SyncFacts(
        points_per_step=len(merged) / w.steps,
        events_per_step={k: v / w.steps for k, v in Counter(e.name for e in calls).items()},
        blocked_fraction=min(1.0, length(merged) / w.total_us),
        sites={k: v / w.steps for k, v in sorted(sites.items(), key=lambda kv: -kv[1])},
    )


def _call_contexts(trace: Trace, calls: list[Event]) -> list[tuple[Event, list[Event], list[Event], list[Event]]]:
    """Each call with the cpu ops, the record_function labels and the Python frames enclosing it on its thread,
    outermost first."""
    by_thread: dict[Any, list[Event]] = defaultdict(list)
    for e in calls:
        by_thread[(e.pid, e.tid)].append(e)
    out = []
    for key, thread_calls in by_thread.items():
        ops = enclosing([e for e in trace.cpu_ops if (e.pid, e.tid) == key], thread_calls)
        labels = enclosing([e for e in trace.annotations if (e.pid, e.tid) == key], thread_calls)
        frames = enclosing([e for e in trace.python if (e.pid, e.tid) == key], thread_calls)
        out += [(call, ops[i], labels[i], frames[i]) for i, call in enumerate(thread_calls)]
    return out


def enclosing(spans: list[Event], points: list[Event]) -> list[list[Event]]:
    """For each of ``points`` (sorted by time), the events of ``spans`` (one thread: properly nested) that
    enclose it, outermost first; one pass over both."""
    spans = sorted(spans, key=lambda e: (e.ts, -e.dur))
    stack: list[Event] = []
    out, i = [], 0
    for point in points:
        while i < len(spans) and spans[i].ts <= point.ts:
            while stack and stack[-1].end <= spans[i].ts:
                stack.pop()
            stack.append(spans[i])
            i += 1
        out.append([e for e in stack if e.ts <= point.ts and e.end >= point.end])
    return out


def _sync_site(copies: list[tuple[float, Any, str]], call: Event, chain: list[Event], labels: list[Event],
               frames: list[Event]) -> str:
    ops = [e for e in chain if "::" in e.name]
    if not ops:
        site = f"{call.name} in {labels[-1].name}" if labels else f"{call.name} outside any op"
    else:
        site = _op_name(ops[0]) if len(ops) == 1 else f"{_op_name(ops[0])} > {ops[-1].name}"
        direction = _copy_direction(copies, ops[0])
        if direction:
            site += f" ({direction} copy)"
    user = [f for f in frames if is_user_frame(f.name)]
    return f"{site} at {user[-1].name}" if user else site


def _op_name(op: Event) -> str:
    """An op as a reader knows it: autograd's `evaluate_function: AddmmBackward0` wrapper is the backward node."""
    return op.name.removeprefix("autograd::engine::evaluate_function: ")


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


def kernel_facts(work: list[DeviceWork], w: Window) -> KernelFacts:
    """Device time by category and by kernel name; the share of GEMM time in fp32 (non-tensor-core) kernels."""
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    gemm_us = fp32_us = 0.0
    for item in work:
        e = item.event
        category = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(e.cat) or categorize(e.name)
        by_cat[category] += e.dur
        by_name[e.name][0] += e.dur
        by_name[e.name][1] += 1
        if category == "gemm" and e.cat == "kernel":
            gemm_us += e.dur
            fp32_us += e.dur if gemm_on_tensor_cores(e.name) is False else 0.0
    return KernelFacts(source="kernels", time_by_category=_per_step(by_cat, w), top=_top(by_name, w),
                       fp32_gemm_fraction=fp32_us / gemm_us if gemm_us else None)


def blocked_spans(trace: Trace, w: Window) -> list[Span]:
    """Host time blocked on the device: synchronizing calls, and copies from or to pageable memory (the
    runtime stages them synchronously)."""
    spans = [e.span for e in sync_calls(trace)]
    spans += [x.launch.span for x in trace.device if x.launch is not None and x.event.cat == "gpu_memcpy" and "Pageable" in x.event.name]
    return merge(clip(spans, w.bounds))


@dataclass(frozen=True)
class IdleGap:
    """A gap in the GPU timeline and the device work that ended it; ``queued``: that work had been launched
    before the gap began, so the GPU waited on something other than the host (another stream, an event)."""

    start: float
    end: float
    following: DeviceWork | None

    @property
    def queued(self) -> bool:
        f = self.following
        return f is not None and (f.launch is None or f.launch.ts < self.start)


def idle_gaps(trace: Trace, w: Window) -> list[IdleGap]:
    """The GPU's idle gaps in the window (no work on any stream), each with the work that ended it."""
    busy = merge([x.event.span for x in trace.device])
    starts = [x.event.ts for x in trace.device]
    out = []
    for g0, g1 in gaps(busy, w.bounds):
        i = bisect.bisect_left(starts, g1 - 1e-6)
        out.append(IdleGap(g0, g1, trace.device[i] if i < len(trace.device) else None))
    return out


def gpu_timeline(trace: Trace, w: Window, gpu_gaps: list[IdleGap], *, data: list[Span], blocked: list[Span]) -> GpuTimeline:
    """GPU busy/idle share of the step and what each idle gap waited for."""
    busy_us = length(clip(merge([x.event.span for x in trace.device]), w.bounds))
    idle = {"data_wait": 0.0, "sync": 0.0, "host": 0.0, "other": 0.0}
    for gap in gpu_gaps:
        g0, g1 = gap.start, gap.end
        if gap.queued:
            idle["other"] += g1 - g0  # the work was queued (or we cannot tell): not the host's doing
            continue
        waited_data = overlap((g0, g1), data)
        idle["data_wait"] += waited_data
        idle["sync" if overlap((g0 - TOUCH_US, g1), blocked) > 0 else "host"] += g1 - g0 - waited_data
    total = w.total_us
    per_step = {k: v / w.steps / 1e6 for k, v in idle.items()}
    return GpuTimeline(
        busy_fraction=min(1.0, busy_us / total), idle_fraction=max(0.0, 1.0 - busy_us / total), busy_s=busy_us / w.steps / 1e6,
        idle=IdleBreakdown(data_wait_s=per_step["data_wait"], sync_s=per_step["sync"], host_s=per_step["host"], other_s=per_step["other"]),
    )


def idle_after_waits(gpu_gaps: list[IdleGap], w: Window, waits: list[Span]) -> float:
    """GPU idle per step (s) in the gaps that opened while the host waited on the device: the wait drained the
    queue, so whatever the host did next (the next batch's loading included) ran with the GPU idle. This, not
    the time blocked, is what a wait costs: a GPU-bound loop blocks long on a `.item()` and loses nothing."""
    return sum(g.end - g.start for g in gpu_gaps
               if not g.queued and overlap((g.start - TOUCH_US, g.start + TOUCH_US), waits) > 0) / w.steps / 1e6


def starved_by(trace: Trace, gpu_gaps: list[IdleGap], w: Window, *, data: list[Span], blocked: list[Span],
               top: int = 5) -> dict[str, float]:
    """GPU idle per step (s) waiting for the host, by the op that launched the work ending each gap (the
    outermost dispatcher op around the launch): what the host was doing while the GPU starved — thousands of
    tiny launches, or one slow host op (a foreach over CPU tensors, a flatten of DDP buffers)."""
    host_gaps = [g for g in gpu_gaps if not g.queued and g.following is not None and g.following.launch is not None
                 and overlap((g.start - TOUCH_US, g.end), blocked) == 0]
    by_thread: dict[Any, list[tuple[IdleGap, Event]]] = defaultdict(list)
    for g in host_gaps:
        launch = g.following.launch  # type: ignore[union-attr]
        by_thread[(launch.pid, launch.tid)].append((g, launch))
    idle: Counter[str] = Counter()
    for key, items in by_thread.items():
        items.sort(key=lambda item: item[1].ts)
        chains = enclosing([e for e in trace.cpu_ops if (e.pid, e.tid) == key], [launch for _, launch in items])
        for (g, _), chain in zip(items, chains):
            ops = [e for e in chain if "::" in e.name]
            idle[_op_name(ops[0]) if ops else "(no op)"] += g.end - g.start - overlap((g.start, g.end), data)
    return {name: us / w.steps / 1e6 for name, us in idle.most_common(top) if us > 0}


def launch_facts(trace: Trace, work: list[DeviceWork], w: Window, timeline: GpuTimeline, *,
                 data: list[Span], blocked: list[Span]) -> LaunchFacts:
    """Is the GPU waiting for the host's launches? Only when it idles while the (unblocked) host is launching."""
    durations = [x.event.dur for x in work if x.event.cat == "kernel"]
    calls = [e for e in trace.runtime if RUNTIME_LAUNCH.search(e.name) and w.contains(e.ts)]
    host_ops = clip([e.span for e in trace.cpu_ops], w.bounds)
    facts = LaunchFacts(
        launch_bound=False,
        kernels_per_step=len(durations) / w.steps,
        median_kernel_us=statistics.median(durations) if durations else None,
        host_launch_s=sum(e.dur for e in calls) / w.steps / 1e6,
        host_active_s=length(subtract(host_ops, blocked + data)) / w.steps / 1e6,
        starved_fraction=timeline.idle.host_s * 1e6 / w.step_us,
        launch_calls_per_step={k: v / w.steps for k, v in sorted(Counter(e.name for e in calls).items())},
    )
    facts.launch_bound = bool(
        facts.kernels_per_step >= LAUNCH_BOUND_KERNELS
        and (facts.median_kernel_us or 0) < LAUNCH_BOUND_MEDIAN_US
        and facts.starved_fraction >= STARVED_MIN_FRACTION
        and facts.host_active_s >= timeline.busy_s
    )
    return facts


def pageable_memcpy(work: list[DeviceWork], w: Window) -> PageableCopies:
    """Host-to-device copies from pageable memory: staged by the driver, blocking the host."""
    pageable = [x.event for x in work if x.event.cat == "gpu_memcpy" and "Pageable" in x.event.name and "HtoD" in x.event.name]
    return PageableCopies(
        count=len(pageable) / w.steps,
        bytes=sum(float(e.args.get("bytes", 0)) for e in pageable) / w.steps,
        time_s=sum(e.dur for e in pageable) / w.steps / 1e6,
    )


def host_transfers(work: list[DeviceWork], w: Window) -> HostTransfers:
    """Every host↔device copy (pinned or pageable): bytes each way, device time, and the share of that time a
    kernel ran beside it (copies overlapping compute cost no step time)."""
    copies = [x.event for x in work if x.event.cat == "gpu_memcpy" and ("HtoD" in x.event.name or "DtoH" in x.event.name)]
    spans = merge([e.span for e in copies])
    kernels = merge([x.event.span for x in work if x.event.cat == "kernel"])
    copy_us = length(spans)
    hidden_us = sum(overlap(span, kernels) for span in spans)
    return HostTransfers(
        h2d_bytes=sum(float(e.args.get("bytes", 0)) for e in copies if "HtoD" in e.name) / w.steps,
        d2h_bytes=sum(float(e.args.get("bytes", 0)) for e in copies if "DtoH" in e.name) / w.steps,
        time_s=copy_us / w.steps / 1e6,
        overlapped_fraction=hidden_us / copy_us if copy_us > 0 else None,
    )


def _inside(ts: float, merged: list[Span], starts: list[float]) -> bool:
    """Whether ``ts`` falls in one of the merged, sorted spans (``starts``: their start times)."""
    i = bisect.bisect_right(starts, ts) - 1
    return i >= 0 and ts < merged[i][1]


def cpu_op_facts(trace: Trace, w: Window, data: list[Span] | None = None) -> tuple[KernelFacts, LaunchFacts]:
    """A CPU-only run: op self times by category, and the dispatch-bound equivalent of launch-bound.

    Ops inside the data spans are the Dataset's (__getitem__ and collate run in the loop's next() without
    workers): they are the data wait, not the step's compute, so they are left out."""
    data = data or []
    starts = [start for start, _ in data]
    ops = [e for e in trace.cpu_ops if w.contains(e.ts) and not _inside(e.ts, data, starts)]
    self_time = _self_times(ops)
    by_cat: dict[str, float] = defaultdict(float)
    by_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for i, e in enumerate(ops):
        t = max(self_time[i], 0.0)
        by_cat[categorize(e.name)] += t
        by_op[e.name][0] += t
        by_op[e.name][1] += 1
    aten_ops = [(e.name, max(self_time[i], 0.0)) for i, e in enumerate(ops) if e.name.startswith("aten::")]
    aten = [t for _, t in aten_ops]
    launch = LaunchFacts(
        launch_bound=False,
        kernels_per_step=len(aten) / w.steps,
        median_kernel_us=statistics.median(aten) if aten else None,
        tiny_op_time_fraction=_tiny_time_fraction(aten_ops),
    )
    launch.launch_bound = bool(
        launch.kernels_per_step >= LAUNCH_BOUND_KERNELS
        and (launch.median_kernel_us or 0) < LAUNCH_BOUND_MEDIAN_US
        and (launch.tiny_op_time_fraction or 0) >= 0.5  # most op time in tiny ops, not in a few big matmuls
    )
    return KernelFacts(source="cpu ops", time_by_category=_per_step(by_cat, w), top=_top(by_op, w)), launch


def _tiny_time_fraction(ops: list[tuple[str, float]]) -> float | None:
    """Share of op time spent in ops whose typical self time is under the launch-bound threshold.

    Typical = each op name's median self time × its calls: on a loaded CPU a few calls that were preempted
    carry milliseconds of someone else's time, and a plain sum let them outweigh thousands of 1 µs ops (a
    dispatch-bound MLP read 10% tiny under load, 57% quiet)."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for name, t in ops:
        by_name[name].append(t)
    typical = {name: (statistics.median(ts), len(ts)) for name, ts in by_name.items()}
    total = sum(m * n for m, n in typical.values())
    if not total:
        return None
    return sum(m * n for m, n in typical.values() if m < LAUNCH_BOUND_MEDIAN_US) / total


def gemm_shapes(trace: Trace, w: Window, *, on_device: bool) -> list[GemmShape]:
    """Hot matmuls by (op, m×k×n, dtype) from recorded shapes, with their time per step: on a GPU the device
    time of the kernels they launched, on CPU the op's own duration."""
    ops = [e for e in trace.cpu_ops if e.name in GEMM_OPS and w.contains(e.ts)]
    times = _device_time_by_op(trace, ops) if on_device else {i: e.dur for i, e in enumerate(ops)}
    groups: dict[tuple[str, tuple[int, int, int], str], GemmShape] = {}
    for i, e in enumerate(ops):
        mkn = _mkn(e)
        if mkn is None:
            continue
        shape, dtype = mkn
        g = groups.setdefault((e.name, shape, dtype), GemmShape(
            op=e.name, shape=list(shape), dtype=dtype, count=0.0, time_s=0.0, time_source="kernels" if on_device else "cpu op"))
        g.count += 1
        g.time_s += times.get(i, 0.0) / 1e6
    for g in groups.values():
        multiple = 8 if any(t in g.dtype.lower() for t in ("half", "bfloat16", "bf16", "fp16")) else 4
        g.misaligned = [name for name, v in zip("mkn", g.shape) if v % multiple]
        g.count /= w.steps
        g.time_s /= w.steps
    return sorted(groups.values(), key=lambda g: -g.time_s)[:20]


# --------------------------------------------------------------------------------------------- entry


def trace_facts(trace_path: Path, *, device_type: str, steps: int, trace: Trace | None = None) -> TraceFacts:
    """Every fact family of one trace; ``steps`` is used only when the trace has no ProfilerStep#N spans.
    ``trace``: the file already read (a large trace is parsed once, not once per analyzer)."""
    trace = trace if trace is not None else read_trace(Path(trace_path))
    w = window(trace, steps)
    work = [x for x in trace.device if w.contains(x.issued)]
    on_device = device_type == "cuda" and bool(work)
    notes = [] if trace.steps else [f"no ProfilerStep#N spans in the trace: its whole span was taken as {w.steps} steps"]
    data = data_spans(trace, w)
    sync = sync_facts(trace, w)
    if on_device:
        blocked = blocked_spans(trace, w)
        gpu_gaps = idle_gaps(trace, w)
        timeline = gpu_timeline(trace, w, gpu_gaps, data=data, blocked=blocked)
        sync.gpu_idle_after_s = idle_after_waits(gpu_gaps, w, blocked)
        kernels, launch = kernel_facts(work, w), launch_facts(trace, work, w, timeline, data=data, blocked=blocked)
        launch.starved_by = starved_by(trace, gpu_gaps, w, data=data, blocked=blocked)
        copies: PageableCopies | None = pageable_memcpy(work, w)
        transfers: HostTransfers | None = host_transfers(work, w)
    else:
        if device_type == "cuda":
            notes.append("no device activity in the CUDA trace (CUPTI off?): facts from host ops")
        (kernels, launch), timeline, copies, transfers = cpu_op_facts(trace, w, data), None, None, None
    return TraceFacts(
        device_type=device_type, steps=w.steps, step_time_s=w.step_us / 1e6,
        data_wait_fraction=min(1.0, length(data) / w.total_us), kernels=kernels, launch=launch, sync=sync,
        gpu=timeline, pageable_memcpy=copies, host_transfers=transfers, gemm_shapes=gemm_shapes(trace, w, on_device=on_device),
        trace_bytes=Path(trace_path).stat().st_size, notes=notes,
    )


# ------------------------------------------------------------------------------------------- helpers


def _self_times(ops: list[Event]) -> dict[int, float]:
    """Self time of each cpu_op (duration minus direct children on the same thread), by index in ``ops``."""
    self_time = {i: e.dur for i, e in enumerate(ops)}
    by_thread: dict[Any, list[int]] = defaultdict(list)
    for i, e in enumerate(ops):
        by_thread[(e.pid, e.tid)].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (ops[i].ts, -ops[i].dur))
        stack: list[int] = []
        for i in indices:
            while stack and ops[stack[-1]].end <= ops[i].ts:
                stack.pop()
            if stack:
                self_time[stack[-1]] -= ops[i].dur
            stack.append(i)
    return self_time


def _device_time_by_op(trace: Trace, ops: list[Event]) -> dict[int, float]:
    """Device µs of the work each op launched (by index in ``ops``): the op enclosing the launch call on its
    thread; for work with no linked launch, the op with the same "External id" (torch ≥ 2.4 writes it)."""
    by_thread: dict[Any, list[tuple[float, float, int]]] = defaultdict(list)
    for i, e in enumerate(ops):
        by_thread[(e.pid, e.tid)].append((e.ts, e.end, i))
    for spans in by_thread.values():
        spans.sort()
    starts = {k: [s for s, _, _ in v] for k, v in by_thread.items()}
    by_ext = {e.external_id: i for i, e in enumerate(ops) if e.external_id is not None}
    out: dict[int, float] = defaultdict(float)
    for x in trace.device:
        if x.launch is not None:
            key = (x.launch.pid, x.launch.tid)
            j = bisect.bisect_right(starts.get(key, []), x.launch.ts) - 1
            if j >= 0 and by_thread[key][j][1] >= x.launch.ts:
                out[by_thread[key][j][2]] += x.event.dur
        elif (i := by_ext.get(x.event.external_id)) is not None:
            out[i] += x.event.dur
    return out


def _per_step(us_by_key: dict[str, float], w: Window) -> dict[str, float]:
    return {k: v / w.steps / 1e6 for k, v in sorted(us_by_key.items(), key=lambda kv: -kv[1])}


def _top(by_name: dict[str, list[float]], w: Window, n: int = 15) -> list[KernelStat]:
    return [
        KernelStat(name=name, time_s=t / w.steps / 1e6, count=c / w.steps, category=categorize(name))
        for name, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:n]
    ]


def _mkn(e: Event) -> tuple[tuple[int, int, int], str] | None:
    """(m, k, n) and the dtype of a matmul op from its recorded inputs, read by position: addmm/baddbmm are
    (bias, a, b, …), mm/bmm (a, b, …); the rest (beta, alpha, an `out=` buffer, as Inductor passes one) is not
    an operand. m folds the leading dims of a (bmm: batch × rows)."""
    dims = e.args.get("Input Dims") or []
    types = list(e.args.get("Input type") or []) + [""] * len(dims)
    first = 1 if e.name in ("aten::addmm", "aten::baddbmm") else 0
    if len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if not (isinstance(a, list) and isinstance(b, list) and len(a) >= 2 and len(b) >= 2):
        return None
    m = 1
    for v in a[:-1]:
        m *= int(v)
    return (m, int(a[-1]), int(b[-1])), str(types[first])

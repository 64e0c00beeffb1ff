"""A Chrome/Kineto trace read once and sorted by what each event is, with device work linked to its launch.

    trace = read_trace(Path("trace/rank0.json.gz"))
    trace.steps                       # host-side ProfilerStep#N spans, in order
    for work in trace.device:         # kernels, memcpys, memsets
        work.event.name, work.launch  # the runtime call that launched it (None when the trace does not say)

Why a layer of its own: every trace fact needs the same three decisions, and each was a bug when made
ad hoc.
- Annotations are read on the host only. On CUDA, Kineto writes every record_function span twice: a
  `user_annotation` on the host thread and a `gpu_user_annotation` copy on the GPU timeline (spanning the
  kernels launched inside it). Counting both doubled the step count. Older torch recorded ProfilerStep#N
  as a `cpu_op`, so that category counts too.
- Device work is linked to its launching runtime call by correlation id: the event's "correlation" arg,
  or, when a trace lacks it, the `ac2g` flow event (id = correlation) that starts at the runtime call and
  ends at the kernel. The launch time says which step the kernel belongs to (a GPU-bound step's kernels run
  after its host span ends) and whether the GPU was waiting for the host.
- `cuda_sync` events ("Stream Sync" on the GPU row) record a host synchronization, not GPU work: they are
  never device busy time.

Why events are kept lean: a trace of a few LLM steps is millions of events (1-4 GB of JSON), streamed by
perfscope.trace.reader one at a time into a TraceBuilder that keeps only what some fact reads. An event kept is a
slotted record whose name, category, pid and tid are shared strings; its args hold only the keys in KEPT_ARGS (shapes
only on the matmul and collective ops that are sized by them), the correlation id is a field, Python frames are kept
only where they are the user's own (the only ones a fact names), ac2g flows are packed arrays read only when an event
lacks its correlation arg, and every other event (flows of other kinds, metadata, instants, GPU copies of annotations)
is dropped as it is read.
"""

from __future__ import annotations

import gc
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.trace.intervals import Span

HOST_ANNOTATIONS = ("user_annotation", "cpu_op")
"""Categories a ProfilerStep#N or record_function span is read from (cpu_op: torch versions before ~1.13)."""
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
PYTHON = "python_function"
"""Python frames (torch.profiler with_stack=True): "my_model.py(42): train_step" spans on the host thread."""
RUNTIME = ("cuda_runtime", "cuda_driver")
STEP_PREFIX = "ProfilerStep#"
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")  # leaves: linear/matmul decompose into these
COMM_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")
GLOO_PREFIX = "gloo:"
USER_FRAME = re.compile(r"\.py\(\d+\): ")
LIBRARY_FRAME = re.compile(r"(?:^|/)(?:torch|perfscope|site-packages|dist-packages)/|^(?:contextlib|threading|runpy)\.py")
"""Python frames of a stack trace: the user's are files outside torch, perfscope and installed packages."""
SIZE_ARGS = ("Input Dims", "Input type", "In msg nelems", "Out msg nelems", "dtype")
"""Shapes and message sizes: read on matmul ops (GEMM shapes) and collectives (payload bytes) only."""
KEPT_ARGS = {
    "kernel": ("In msg nelems", "Out msg nelems", "dtype"),
    "gpu_memcpy": ("bytes",),
    "gpu_memset": ("bytes",),
}
"""The args a fact reads of device work (NCCL kernels' sizes, copies' bytes); a host op's are decided by its name
(_host_args). The "External id" is a field of its own, the kernels' "device" a count (Trace.kernel_devices)."""
_NO_ARGS: dict[str, Any] = {}
"""Shared by every event with no kept args: never mutated."""


def is_user_frame(name: str) -> bool:
    return bool(USER_FRAME.search(name)) and not LIBRARY_FRAME.search(name)


@dataclass(frozen=True, slots=True)
class Event:
    """One complete ("X") event; times in microseconds as the trace writes them."""

    name: str
    cat: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    args: dict[str, Any]
    """Only the args some fact reads (KEPT_ARGS, _host_args)."""
    correlation: int | None = None
    """The "correlation" arg (runtime calls and device work), when the trace writes it."""
    external_id: Any = None
    """The "External id" arg of device work and matmul ops (it links work to the op when the launch is missing)."""

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def span(self) -> Span:
        return (self.ts, self.ts + self.dur)


@dataclass(frozen=True, slots=True)
class DeviceWork:
    """A kernel, memcpy or memset, with the runtime/driver call that launched it."""

    event: Event
    launch: Event | None

    @property
    def issued(self) -> float:
        """When the host asked for it: the launch call's start, else (unlinked) its own start."""
        return self.launch.ts if self.launch is not None else self.event.ts


@dataclass(kw_only=True)
class Trace:
    steps: list[Span] = field(default_factory=list)
    """Host-side ProfilerStep#N spans, sorted."""
    annotations: list[Event] = field(default_factory=list)
    """Host-side record_function spans (user_annotation), ProfilerStep#N excluded."""
    cpu_ops: list[Event] = field(default_factory=list)
    runtime: list[Event] = field(default_factory=list)
    python: list[Event] = field(default_factory=list)
    """The user's own Python frames (is_user_frame), when the trace was recorded with stacks."""
    device: list[DeviceWork] = field(default_factory=list)
    """Sorted by start time."""
    complete_events: int = 0
    """Complete ("X") events with a start and a duration in the file, kept or not."""
    kernel_devices: Counter[int] = field(default_factory=Counter)
    """Kernels by their "device" arg (a device index): which GPU of the host the rank ran on."""

    def labelled(self, name: str) -> list[Span]:
        return [e.span for e in self.annotations if e.name == name]


def read_trace(path: Path) -> Trace:
    """Parse a Chrome trace (.json or .json.gz; an object with traceEvents, or a bare list), streamed."""
    from perfscope.trace.reader import stream_trace  # the reader names the file in its errors

    builder = TraceBuilder()
    with paused_gc():
        stream_trace(Path(path), builder.add)
        return builder.finish()


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off while millions of acyclic records are made: each of its full passes walks
    every one of them (a tenth of the read time of a 50 MB trace, growing with the trace); refcounting frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def build_trace(raw: list[dict[str, Any]]) -> Trace:
    """The Trace of events already in memory (hand-built traces, tests)."""
    builder = TraceBuilder()
    for e in raw:
        builder.add(e)
    return builder.finish()


class TraceBuilder:
    """Events in, one at a time, in file order; finish() links device work to its launch and sorts."""

    def __init__(self) -> None:
        self.trace = Trace()
        self._steps: dict[str, Span] = {}
        self._device: list[Event] = []
        self._shared: dict[Any, Any] = {}
        self._flow_ts = array("d")
        self._flow_ids: list[Any] = []
        self._flow_where: list[tuple[Any, Any]] = []
        self._uncorrelated = False
        self._host_args: dict[str, tuple[str, ...]] = {}
        self._shapes: dict[Any, Any] = {}
        t = self.trace
        self._kinds: dict[str, tuple[list[Event], tuple[str, ...] | None, bool]] = {
            "cpu_op": (t.cpu_ops, None, False), "user_annotation": (t.annotations, None, False), PYTHON: (t.python, (), False),
            **{cat: (t.runtime, (), True) for cat in RUNTIME},
            **{cat: (self._device, KEPT_ARGS[cat], True) for cat in DEVICE_WORK},
        }
        """Category -> (where its events go, the args kept (None: by op name), linked by correlation)."""

    def add(self, e: Any) -> None:
        """Keep what the facts read of one event (millions of calls: kept short, shared strings, positional)."""
        if e.__class__ is not dict:
            return
        ph = e.get("ph")
        if ph != "X":
            if (ph == "s" or ph == "f") and e.get("cat") == "ac2g" and "id" in e:
                share = self._shared.setdefault
                pid, tid = e.get("pid"), e.get("tid")
                self._flow_where.append((share(pid, pid), share(tid, tid)))
                self._flow_ts.append(float(e.get("ts", 0)))
                self._flow_ids.append(e["id"])
            return
        if "ts" not in e or "dur" not in e:
            return
        ts, dur = float(e["ts"]), float(e["dur"])
        self.trace.complete_events += 1
        cat = e.get("cat", "")
        if cat.__class__ is not str:
            cat = str(cat)
        name = e.get("name", "")
        if name.__class__ is not str:
            name = str(name)
        kind = self._kinds.get(cat)
        if kind is None:
            return
        kept, names, linked = kind
        if cat in HOST_ANNOTATIONS and name.startswith(STEP_PREFIX):
            self._steps.setdefault(name, (ts, ts + dur))
            return
        if kept is self.trace.python and not is_user_frame(name):
            return
        args = e.get("args")
        correlation = small = external = None
        if args and args.__class__ is dict:
            if linked:
                correlation = args.get("correlation")
                if correlation.__class__ is not int:
                    correlation = None
                external = args.get("External id")
                if cat == "kernel":
                    device = args.get("device")
                    if device.__class__ is int and device >= 0:
                        self.trace.kernel_devices[device] += 1
            if names is None:
                names = self._host_args.get(name)
                if names is None:
                    names = self._host_args[name] = _host_args(name)
                if names is _MATMUL_ARGS:
                    external = args.get("External id")
            if names:
                small = {k: self._frozen(args[k]) for k in names if k in args}
        if linked and correlation is None:
            self._uncorrelated = True
        share = self._shared.setdefault
        pid, tid = e.get("pid"), e.get("tid")
        kept.append(Event(share(name, name), share(cat, cat), ts, dur, share(pid, pid), share(tid, tid),
                          small or _NO_ARGS, correlation, external))

    def _frozen(self, value: Any) -> Any:
        """One shared object for equal shape lists ("Input Dims" of every matmul of a layer repeat; never mutated)."""
        if value.__class__ is not list:
            return value
        try:
            return self._shapes.setdefault(_freeze(value), value)
        except TypeError:  # an unhashable leaf (a dict): kept as it is
            return value

    def finish(self) -> Trace:
        trace = self.trace
        trace.steps = sorted(self._steps.values())
        flows: dict[tuple[Any, Any, float], Any] = {}
        if self._uncorrelated:  # (pid, tid, ts) of a flow end -> correlation id; a later flow wins, as json order
            flows = {(*where, ts): ident for where, ts, ident in zip(self._flow_where, self._flow_ts, self._flow_ids)}
        self._flow_where, self._flow_ts, self._flow_ids = [], array("d"), []
        launches = {c: e for e in trace.runtime if (c := _correlation(e, flows)) is not None}
        trace.device = sorted(
            (DeviceWork(event=e, launch=launches.get(_correlation(e, flows))) for e in self._device),  # type: ignore[arg-type]
            key=lambda w: w.event.ts,
        )
        self._device = []
        return trace


def _host_args(name: str) -> tuple[str, ...]:
    """A host op's or annotation's kept args: shapes for a matmul (GEMM shapes, and its External id, which links
    kernels without a launch), sizes for a collective op or a record_function span (gloo:all_reduce and the like:
    payload bytes), nothing for the other ops (most of the events, and most of their bytes)."""
    if name in GEMM_OPS:
        return _MATMUL_ARGS
    if name.partition("::")[0] in COMM_NAMESPACES or "::" not in name:  # c10d ops; annotations (gloo:, nccl:), few
        return SIZE_ARGS
    return ()


_MATMUL_ARGS = ("Input Dims", "Input type")


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if value.__class__ is list else value


def _correlation(e: Event, flows: dict[tuple[Any, Any, float], Any]) -> int | None:
    if e.correlation is not None:
        return e.correlation
    return flows.get((e.pid, e.tid, e.ts)) if flows else None

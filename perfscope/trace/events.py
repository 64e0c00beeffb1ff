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
"""

from __future__ import annotations

import gzip
import json
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
    """Python frames, when the trace was recorded with stacks."""
    device: list[DeviceWork] = field(default_factory=list)
    """Sorted by start time."""

    def labelled(self, name: str) -> list[Span]:
        return [e.span for e in self.annotations if e.name == name]


def read_trace(path: Path) -> Trace:
    """Parse a Chrome trace (.json or .json.gz; an object with traceEvents, or a bare list)."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    return build_trace(raw)


def build_trace(raw: list[dict[str, Any]]) -> Trace:
    trace = Trace()
    flows: dict[tuple[Any, Any, float], int] = {}  # (pid, tid, ts) of a flow end -> correlation id
    steps: dict[str, Span] = {}
    device: list[Event] = []
    for e in raw:
        ph = e.get("ph")
        if ph in ("s", "f") and e.get("cat") == "ac2g" and "id" in e:
            flows[(e.get("pid"), e.get("tid"), float(e.get("ts", 0)))] = e["id"]
            continue
        if ph != "X" or "ts" not in e or "dur" not in e:
            continue
        event = Event(name=str(e.get("name", "")), cat=str(e.get("cat", "")), ts=float(e["ts"]), dur=float(e["dur"]),
                      pid=e.get("pid"), tid=e.get("tid"), args=e.get("args") or {})
        if event.cat in HOST_ANNOTATIONS and event.name.startswith(STEP_PREFIX):
            steps.setdefault(event.name, event.span)
        elif event.cat == "user_annotation":
            trace.annotations.append(event)
        elif event.cat == "cpu_op":
            trace.cpu_ops.append(event)
        elif event.cat in RUNTIME:
            trace.runtime.append(event)
        elif event.cat == PYTHON:
            trace.python.append(event)
        elif event.cat in DEVICE_WORK:
            device.append(event)
    trace.steps = sorted(steps.values())
    launches = {c: e for e in trace.runtime if (c := _correlation(e, flows)) is not None}
    trace.device = sorted(
        (DeviceWork(event=e, launch=launches.get(_correlation(e, flows))) for e in device),  # type: ignore[arg-type]
        key=lambda w: w.event.ts,
    )
    return trace


def _correlation(e: Event, flows: dict[tuple[Any, Any, float], int]) -> int | None:
    value = e.args.get("correlation")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return flows.get((e.pid, e.tid, e.ts))

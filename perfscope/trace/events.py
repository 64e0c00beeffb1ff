"""A Chrome/Kineto trace read once and sorted by what each event is, with device work linked to its launch.

Design notes: docs/trace.md."""

from __future__ import annotations

import gc
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfscope.trace.intervals import Span
from perfscope.trace.reader import MAX_DURATION_US, BadEvent, why_broken
from perfscope.trace.table import FLUSH, NONE, EventColumns, Grower, Strings, ext_code, last_match

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
OLD_SPELLINGS = {"operator": "cpu_op", "runtime": "cuda_runtime", "driver": "cuda_driver", "memcpy": "gpu_memcpy",
                 "memset": "gpu_memset"}
"""Categories are matched lower-cased, these as today's: torch 1.8-1.9 (and some tools) wrote "Kernel", "Operator",
"Runtime", "Memcpy", "Memset"; HTA reads them, and so does perfscope."""
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
    """Only the args some fact reads (KEPT_ARGS, _host_args); the correlation and External id are columns."""

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def span(self) -> Span:
        return (self.ts, self.ts + self.dur)


KINDS = ("cpu_ops", "annotations", "runtime", "python", "device")
"""The tables of a Trace: host ops, host record_function spans (ProfilerStep#N excluded), runtime calls, the user's
own Python frames (is_user_frame), device work (sorted by start, with its launch call's columns)."""


@dataclass(eq=False)
class Trace:
    """The kept events of a trace, one table of columns per kind: what the analyzers read."""

    tables: dict[str, EventColumns]
    steps: list[Span] = field(default_factory=list)
    """Host-side ProfilerStep#N spans, sorted; else the steps perfscope.trace.window.find_steps found (``steps_from`` says how)."""
    steps_from: str = ""
    complete_events: int = 0
    """Complete ("X") events with a usable start and duration in the file, kept or not."""
    unusable: Counter[str] = field(default_factory=Counter)
    """Complete events skipped as broken, by why (a NaN or infinite timestamp, a negative duration, ...)."""
    kernel_devices: Counter[int] = field(default_factory=Counter)
    """Kernels by their "device" arg (a device index): which GPU of the host the rank ran on."""

    def columns(self, kind: str) -> EventColumns:
        return self.tables[kind]

    def issued(self, lo: float, hi: float) -> np.ndarray:
        """Rows of the device table whose work was issued in [lo, hi]: its launch call's start, else its own."""
        t = self.tables["device"]
        issued = np.where(t.linked, t.launch_ts, t.ts)
        return np.flatnonzero((issued >= lo) & (issued <= hi))

    def events(self, kind: str, rows: np.ndarray | None = None) -> list[Event]:
        """The given rows (default: all) of a table as Event objects."""
        t = self.tables[kind]
        return [event_at(t, i) for i in (range(len(t)) if rows is None else rows.tolist())]


def event_at(t: EventColumns, i: int) -> Event:
    """Row ``i`` of a table as an Event."""
    a = int(t.args[i])
    return Event(t.names[t.name[i]], t.cats[t.cat[i]], float(t.ts[i]), float(t.dur[i]), t.values[t.pid[i]],
                 t.values[t.tid[i]], t.arg_table[a] if a >= 0 else _NO_ARGS)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off while millions of objects are made: each of its full passes walks every
    one of them; refcounting frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_CPU, _ANNOTATION, _RUNTIME, _PYTHON, _DEVICE = range(5)
_BIG = 1 << 62
"""Ids (correlation, External id) within ±_BIG are kept as int64; others are interned (table.ext_code)."""


class TraceBuilder:
    """Events in, a batch at a time, in file order, into columns; finish() links device work to its launch and sorts."""

    def __init__(self) -> None:
        self.complete_events = 0
        self.kernel_devices: Counter[int] = Counter()
        self.unusable: Counter[str] = Counter()
        self._steps: dict[str, Span] = {}
        self._strings = (Strings(), Strings(), Strings(), Strings(), Strings())  # names, cats, values, args, exts
        self._growers = [Grower() for _ in KINDS]
        self._flows = Grower(Grower.FLOWS)
        self._flow_ids = Strings()
        self._uncorrelated = False
        self._name_args: dict[int, tuple[str, ...]] = {}
        self._user_frame: dict[int, bool] = {}
        g = self._growers
        cat_id = self._strings[1].id
        self._kinds: dict[str, tuple[int, list[Any], bool, int, int]] = {
            "cpu_op": (_CPU, g[_CPU].rows, False, -1, cat_id("cpu_op")),
            "user_annotation": (_ANNOTATION, g[_ANNOTATION].rows, False, -1, cat_id("user_annotation")),
            PYTHON: (_PYTHON, g[_PYTHON].rows, False, -1, cat_id(PYTHON)),
            **{cat: (_RUNTIME, g[_RUNTIME].rows, True, -1, cat_id(cat)) for cat in RUNTIME},
            **{cat: (_DEVICE, g[_DEVICE].rows, True, i, cat_id(cat)) for i, cat in enumerate(DEVICE_WORK)},
        }
        """Category -> (kind, its rows, linked by correlation, the device work's KEPT_ARGS index, its id)."""
        self._kept_device = [KEPT_ARGS[cat] for cat in DEVICE_WORK]

    def add_batch(self, items: Any) -> None:
        """Keep what the facts read of each event: the per-event work is field extraction into one row tuple per
        kept event (millions of iterations: everything a local, every lookup a dict's)."""
        kinds, steps, kernel_devices = self._kinds, self._steps, self.kernel_devices
        names, cats, values, arg_table, exts = self._strings
        name_ids, value_ids = names.ids, values.ids
        user_frame, name_args, kept_device = self._user_frame, self._name_args, self._kept_device
        flows = self._flows.rows
        complete, n = 0, 0
        try:
            for n, e in enumerate(items):  # noqa: B007 (n: where an error was)
                if e.__class__ is not dict:
                    continue
                ph = e.get("ph")
                if ph != "X":
                    if (ph == "s" or ph == "f") and e.get("cat") == "ac2g" and "id" in e:
                        flows.append((float(e.get("ts", 0)), values.id(e.get("pid")), values.id(e.get("tid")),
                                      ext_code(e["id"], self._flow_ids)))
                    continue
                ts, dur = e.get("ts"), e.get("dur")
                if ts is None or dur is None:
                    if "ts" in e and "dur" in e:  # a null time: the error float() gives it
                        float(ts)
                        float(dur)
                    continue
                ts, dur = float(ts), float(dur)
                if not (ts - ts == 0.0 and 0.0 <= dur <= MAX_DURATION_US):  # NaN, ±inf, negative, absurd
                    self.unusable[why_broken(ts, dur)] += 1
                    continue
                complete += 1
                cat = e.get("cat", "")
                if cat.__class__ is not str:
                    cat = str(cat)
                kind = kinds.get(cat)
                if kind is None:
                    same = OLD_SPELLINGS.get(low := cat.lower(), low)
                    if same not in kinds:
                        continue
                    kind = kinds[cat] = kinds[same]  # an old spelling, read as today's from now on
                which, rows, linked, device_args, cid = kind
                name = e.get("name", "")
                if name.__class__ is not str:
                    name = str(name)
                if which <= _ANNOTATION and name.startswith(STEP_PREFIX):
                    steps.setdefault(name, (ts, ts + dur))
                    continue
                nid = name_ids.get(name)
                if nid is None:
                    nid = names.id(name)
                if which == _PYTHON:
                    user = user_frame.get(nid)
                    if user is None:
                        user = user_frame[nid] = is_user_frame(name)
                    if not user:
                        continue
                args = e.get("args")
                correlation = external = None
                a = -1
                if args and args.__class__ is dict:
                    if linked:
                        correlation = args.get("correlation")
                        if correlation.__class__ is not int:
                            correlation = None
                        external = args.get("External id")
                        if device_args == 0:
                            device = args.get("device")
                            if device.__class__ is int and device >= 0:
                                kernel_devices[device] += 1
                        kept = kept_device[device_args] if device_args >= 0 else ()
                    else:
                        kept = name_args.get(nid)
                        if kept is None:
                            kept = name_args[nid] = _host_args(name)
                        if kept is _MATMUL_ARGS or kept is SIZE_ARGS:  # links kernels to a matmul / collective op
                            external = args.get("External id")
                    small = None
                    for k in kept:
                        if k in args:
                            if small is None:
                                small = {}
                            small[k] = args[k]
                    if small is not None:
                        a = _intern_args(arg_table, small)
                if linked and correlation is None:
                    self._uncorrelated = True
                pid, tid = e.get("pid"), e.get("tid")
                pid_id = value_ids.get(pid)
                if pid_id is None:
                    pid_id = values.id(pid)
                tid_id = value_ids.get(tid)
                if tid_id is None:
                    tid_id = values.id(tid)
                rows.append((ts, dur, nid, cid, pid_id, tid_id,
                             correlation if correlation is not None and -_BIG < correlation < _BIG else NONE,
                             NONE if external is None else external if external.__class__ is int and -_BIG < external < _BIG
                             else ext_code(external, exts), a))
        except (TypeError, ValueError, KeyError) as exc:
            raise BadEvent(n, exc) from exc
        finally:
            self.complete_events += complete
        for grower in self._growers:
            if len(grower.rows) >= FLUSH:
                grower.flush()
        if len(flows) >= FLUSH:
            self._flows.flush()

    def finish(self) -> Trace:
        names, cats, values, args, _ = self._strings
        shared = dict(names=names.values, cats=cats.values, values=values.values, args=args.values)
        growers = dict(zip(KINDS, self._growers))
        order = np.argsort(growers["device"].ts(), kind="stable")  # device work by start time
        tables = {kind: EventColumns(g.columns(order if kind == "device" else None), **shared)  # type: ignore[arg-type]
                  for kind, g in growers.items()}
        runtime, device = tables["runtime"], tables["device"]
        if self._uncorrelated:  # (pid, tid, ts) of a flow end -> correlation id; a later flow wins, as json order
            flows = self._flows.columns()
            ends = dict(zip(zip(flows["pid"].tolist(), flows["tid"].tolist(), flows["ts"].tolist()), flows["id"].tolist()))
            for t in (runtime, device):
                t.corr = t.corr.copy()  # a constant view is read-only
                for i in np.flatnonzero(t.corr == NONE).tolist():
                    t.corr[i] = ends.get((int(t.pid[i]), int(t.tid[i]), float(t.ts[i])), NONE)
        self._flows = Grower(Grower.FLOWS)
        launch = last_match(runtime.corr, device.corr)  # each device row's launch: the runtime row of its correlation
        found = launch >= 0
        pick = np.where(found, launch, 0)
        for key, column, absent in (("launch_ts", runtime.ts, np.nan), ("launch_dur", runtime.dur, np.nan),
                                    ("launch_pid", runtime.pid, -1), ("launch_tid", runtime.tid, -1),
                                    ("launch_name", runtime.name, -1)):
            setattr(device, key, np.where(found, column[pick], absent).astype(column.dtype) if len(column) else
                    np.full(len(launch), absent, column.dtype))
        return Trace(tables, steps=sorted(self._steps.values()), complete_events=self.complete_events,
                     kernel_devices=self.kernel_devices, unusable=self.unusable)


def _intern_args(table: Strings, small: dict[str, Any]) -> int:
    """One id for equal kept args ("Input Dims" of every matmul of a layer repeat): the first dict is kept. The key
    is the dict's repr: JSON values are equal exactly when their reprs are (1 and 1.0 and true apart, NaN apart
    from null), and repr is C, where a recursive freeze to tuples was a Python call per nested list."""
    key = repr(small)
    i = table.ids.get(key)
    if i is None:
        i = table.id(key)
        table.values[i] = small
    return i


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

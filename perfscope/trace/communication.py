"""One rank's trace → communication against compute: collective time, the part no compute hid, bus bandwidth.

Design notes: docs/trace.md."""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

import numpy as np

from perfscope.hardware import bus_bandwidth_gbps
from perfscope.results.distributed import CollectiveStat, CommunicationFacts
from perfscope.results.messages import msg
from perfscope.trace.events import COMM_NAMESPACES, GLOO_PREFIX, Event, Trace
from perfscope.trace.inputs import read_trace
from perfscope.trace.intervals import Span, SpanArray, clip, length, merge, subtract
from perfscope.trace.kernels import collective_spans
from perfscope.trace.window import Window, data_spans, step_notes, window

NCCL_PREFIX = "nccl:"
NO_COLLECTIVES = msg("no_collectives_in_steps")
_DISPATCHER_OP = re.compile(r"^\w+::\w+$")
_NCCL_OP = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll|Send|Recv)", re.I)
_KIND = re.compile(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send_?recv|dispatch|combine|"
                   r"send|recv)", re.I)
"""The collective a kernel outside NCCL's naming runs; DeepEP's dispatch/combine are a MoE's all-to-all."""
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "c10::half": 2, "half": 2, "float16": 2, "c10::bfloat16": 2,
    "bfloat16": 2, "long int": 8, "int64": 8, "long": 8, "int": 4, "int32": 4, "short int": 2, "int16": 2,
    "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "bool": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
}


def collective_op(name: str) -> str | None:
    """The collective a trace name runs, in snake case ("all_reduce"), or None when it is not a collective.

    `gloo:all_reduce`, `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`, `c10d::allreduce_`,
    `c10d::_reduce_scatter_base_`, `_c10d_functional::all_gather_into_tensor` all name one."""
    if name.startswith((GLOO_PREFIX, NCCL_PREFIX)):  # record_function spans: "gloo:all_reduce", "nccl:all_to_all"
        return _snake(name.partition(":")[2])
    if name.lower().startswith("nccl"):
        m = _NCCL_OP.search(name[4:])
        return _snake(re.sub(r"(?<=[a-z])(?=[A-Z])", "_", m.group(1))) if m else "other"
    namespace, _, op = name.partition("::")
    if namespace in COMM_NAMESPACES and op and op not in ("wait", "wait_tensor", "barrier", "monitored_barrier"):
        return _snake(op)
    return None


def kernel_collective(name: str) -> str:
    """The collective a communication kernel runs: collective_op's reading, else (RCCL, NVSHMEM, DeepEP, MSCCL,
    custom all-to-all / send-recv kernels) the kind its name says; "other" when it says none."""
    op = collective_op(name)
    if op is not None:
        return op
    m = _KIND.search(name)
    kind = m.group(1).lower() if m else "other"
    return f"moe_{kind}" if kind in ("dispatch", "combine") else _snake(kind.replace("_", ""))


def _snake(op: str) -> str:
    op = op.strip("_").lower()
    for suffix in ("_base", "_into_tensor", "_coalesced", "_tensor", "_single"):
        op = op.replace(suffix, "")
    op = op.strip("_")
    return {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "sendrecv": "send_recv"}.get(op, op)


def _elements(dims: object) -> int:
    """Elements of an "Input Dims" entry: a shape, or a list of shapes (a TensorList)."""
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    return sum(_elements(d) for d in dims)


def payload_bytes_of(event: Event, op: str, world_size: int) -> int | None:
    """Bytes a collective moved by the NCCL-tests convention (all-gather: the gathered output; reduce-scatter:
    the full input), from the event's args; None when the trace does not say."""
    args = event.args
    if "In msg nelems" in args:  # NCCL kernels / record_param_comms
        size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
        nelems = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
        return nelems * size if size and nelems else None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not dims or not isinstance(types, list) or not types:
        return None
    size = DTYPE_BYTES.get(str(types[0]).lower())
    nelems = _elements(dims[0])  # the first input is the tensor (list) the collective runs on
    if not size or not nelems:
        return None
    return nelems * size * (world_size if op == "all_gather" else 1)  # gloo shows the input shard


def _host_spans(trace: Trace, w: Window) -> tuple[list[tuple[str, Event]], SpanArray, SpanArray]:
    """CPU: (collective runs (op, event), all collective spans, compute spans), in the window."""
    annotations, cpu_ops = trace.events("annotations"), trace.events("cpu_ops")
    threads = {(e.pid, e.tid) for e in annotations if e.name.startswith(GLOO_PREFIX)}
    gloo = [(op, e) for e in annotations if (op := collective_op(e.name)) is not None]
    comm_ops = [e for e in cpu_ops if e.name.partition("::")[0] in COMM_NAMESPACES]
    enqueue = [(op, e) for e in comm_ops if (op := collective_op(e.name)) is not None]
    inside_comm: dict[tuple[object, object], list[Span]] = defaultdict(list)
    for e in comm_ops:
        inside_comm[(e.pid, e.tid)].append(e.span)
    compute = [
        e.span for e in cpu_ops
        if (e.pid, e.tid) not in threads and _DISPATCHER_OP.match(e.name) and e.name.partition("::")[0] not in COMM_NAMESPACES
        and not any(s <= e.ts and e.end <= t for s, t in inside_comm.get((e.pid, e.tid), ()))  # the collective's own copies
    ]
    collective = merge(clip([e.span for _, e in gloo] + [e.span for e in comm_ops], w.bounds))
    return [(op, e) for op, e in gloo or enqueue if w.contains(e.ts)], collective, merge(clip(compute, w.bounds))


def _device_spans(trace: Trace, w: Window) -> tuple[list[tuple[str, Event]], SpanArray, SpanArray]:
    """CUDA: (NCCL kernels (op, event), their spans, other device work's spans), for the work the window issued."""
    rows, collective, compute = collective_spans(trace, w)
    named = launched_by(trace, rows)
    return [(named[i] or kernel_collective(e.name), e) for i, e in enumerate(trace.events("device", rows))], collective, compute


def launched_by(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """For each device row, the collective the host op that launched it names (`c10d::alltoall_base_`, an
    `nccl:all_to_all` annotation), or None: the trace's own word on a kernel whose name may say less (torchrec's
    all-to-all runs as NCCL SendRecv kernels)."""
    t = trace.columns("device")
    spans: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for kind in ("cpu_ops", "annotations"):
        c = trace.columns(kind)
        if not len(c):
            continue
        keys = c.thread()
        for i in np.flatnonzero(c.by_name(lambda n: collective_op(n) is not None)).tolist():
            spans[int(keys[i])].append((float(c.ts[i]), float(c.end[i]), collective_op(c.names[c.name[i]]) or ""))
    if not spans or not len(rows):
        return [None] * len(rows)
    for ops in spans.values():
        ops.sort()
    starts = {k: [s for s, _, _ in ops] for k, ops in spans.items()}
    threads, linked = t.launch_thread()[rows], t.linked[rows]
    out: list[str | None] = []
    for row, key, has in zip(rows.tolist(), threads.tolist(), linked.tolist()):
        ops = spans.get(int(key)) if has else None
        found = None
        if ops:
            at = float(t.launch_ts[row])
            j = bisect_right(starts[int(key)], at)
            for s, e, op in reversed(ops[max(0, j - 8):j]):  # the nearest enclosing of the last few that started
                if s <= at <= e:
                    found = op
                    break
        out.append(found)
    return out


def communication_facts(trace_path: Path, *, rank: int, device_type: str, steps: int, world_size: int,
                        payload_bytes: dict[str, int] | None = None, trace: Trace | None = None) -> CommunicationFacts:
    """Per traced step: collective, compute and exposed collective time, and each collective's bus bandwidth.

    ``payload_bytes``: bytes per step each op must move ({"all_reduce": gradient bytes} for DDP), used instead
    of the sizes in the trace; ``steps`` only when the trace has no ProfilerStep#N spans; ``trace``: the file
    already read."""
    trace = trace if trace is not None else read_trace(Path(trace_path))
    w = window(trace, steps)
    notes = step_notes(trace, w)
    on_device, runs, collective, compute, exposed = _against_compute(trace, w, device_type)
    if on_device:
        source = "communication kernels (NCCL, RCCL, NVSHMEM, DeepEP, ...) against the other device work"
    else:
        source = "gloo collective threads against the dispatcher ops of the other threads"
        if device_type == "cuda":
            notes.append(msg("no_device_activity", read="collectives read from host threads"))
        if collective:
            notes.append(msg("gloo_shares_cores"))
    per_step = 1e6 * w.steps
    collective_us, exposed_us = length(collective), length(exposed)
    if not runs:
        notes.append(NO_COLLECTIVES)
    return CommunicationFacts(
        rank=rank, step_s=w.step_us / 1e6, compute_s=length(compute) / per_step, collective_s=collective_us / per_step,
        exposed_collective_s=exposed_us / per_step,
        overlap_share=max(0.0, min(1.0, 1.0 - exposed_us / collective_us)) if collective_us > 0 else None,
        collectives=_per_op(runs, w, world_size=world_size, payload_bytes=payload_bytes or {}),
        source=source, notes=notes,
    )


def exposed_collective_by_step(trace: Trace, *, device_type: str) -> list[float]:
    """Seconds of exposed collective time in each ProfilerStep#N step, in step order, decided as in
    communication_facts (the work a step issued; compute and data wait hide collectives). What a rank waited for
    the network or a peer, step by step: a rank's step minus it is the rank's own work (perfscope.trace.offline.trace_stragglers)."""
    return [length(_against_compute(trace, Window(spans=[span], steps=1), device_type)[4]) / 1e6 for span in trace.steps]


def _against_compute(trace: Trace, w: Window, device_type: str) -> tuple[bool, list[tuple[str, Event]], SpanArray, SpanArray, SpanArray]:
    """(on the device?, the collective runs, collective spans, compute spans, exposed collective spans) of the window:
    compute less the data wait (the Dataset's ops in the loop's next() are the data wait, as in facts.py); what
    neither compute nor the data wait hides is exposed."""
    on_device = device_type == "cuda" and bool(len(trace.issued(*w.bounds)))
    runs, collective, compute = (_device_spans if on_device else _host_spans)(trace, w)
    data = data_spans(trace, w)
    compute = subtract(compute, data)
    return on_device, runs, collective, compute, subtract(collective, compute + data)


def _per_op(runs: list[tuple[str, Event]], w: Window, *, world_size: int, payload_bytes: dict[str, int]) -> list[CollectiveStat]:
    """Calls, time (the union of the op's spans), bytes and bus bandwidth per step for each op, longest first."""
    spans: dict[str, list[Span]] = defaultdict(list)
    sizes: dict[str, list[int | None]] = defaultdict(list)
    for op, e in runs:
        spans[op].append(e.span)
        sizes[op].append(payload_bytes_of(e, op, world_size))
    stats = []
    for op, op_spans in spans.items():
        seconds = length(op_spans) / 1e6 / w.steps
        if op in payload_bytes:
            nbytes: int | None = int(payload_bytes[op])
        else:  # from the trace, when it sizes every call
            known = [n for n in sizes[op] if n is not None]
            nbytes = round(sum(known) / w.steps) if known and len(known) == len(sizes[op]) else None
        stats.append(CollectiveStat(
            op=op, calls_per_step=len(op_spans) / w.steps, time_s_per_step=seconds, bytes_per_step=nbytes,
            bus_gbps=bus_bandwidth_gbps(op, nbytes, seconds, world_size) if nbytes else None,
        ))
    return sorted(stats, key=lambda s: -s.time_s_per_step)


__all__ = ["bus_bandwidth_gbps", "collective_op", "communication_facts", "exposed_collective_by_step", "kernel_collective", "payload_bytes_of"]

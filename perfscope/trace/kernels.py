"""Device work by kind: time by category and by kernel name, pageable copies, host↔device traffic.

Design notes: docs/trace.md."""

from __future__ import annotations

import re

import numpy as np

from perfscope.results.trace_facts import HostTransfers, KernelFacts, KernelStat, PageableCopies
from perfscope.trace.categories import categorize, gemm_on_tensor_cores
from perfscope.trace.events import Event, Trace, event_at
from perfscope.trace.intervals import SpanArray, length, merge, overlap, seqsum
from perfscope.trace.table import NONE, EventColumns
from perfscope.trace.window import Window

_COPY_CATEGORY = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COMM_OP = re.compile(r"^(?:record_param_comms$|c10d::|_c10d_functional::|c10d_functional::|nccl:|gloo:)")
"""Host ops whose kernels are communication whatever their names: torch's record_param_comms and c10d ops."""


def communication_mask(trace: Trace) -> np.ndarray:
    """Which device rows are communication kernels: by what the name says (perfscope.trace.categories), or by the
    trace's own evidence, a kernel launched by a record_param_comms / c10d:: op (its External id)."""
    t, ops = trace.columns("device"), trace.columns("cpu_ops")
    mask = t.by_cat("kernel") & t.by_name(lambda n: categorize(n) == "communication")
    if len(ops) and len(t):
        comm = ops.ext[ops.by_name(COMM_OP.match) & (ops.ext != NONE)]
        if len(comm):
            mask |= t.by_cat("kernel") & np.isin(t.ext, comm) & (t.ext != NONE)
    return mask


def kernel_facts(trace: Trace, work: np.ndarray, w: Window) -> KernelFacts:
    """Device time by category and by kernel name; the share of GEMM time in fp32 (non-tensor-core) kernels."""
    t = trace.columns("device")
    name, dur = t.name[work], t.dur[work]
    used, inverse = np.unique((name.astype(np.int64) << 32) | t.cat[work].astype(np.int64), return_inverse=True)
    labels: dict[str, int] = {}
    cat_of, gemm, fp32 = [], [], []
    for k in used.tolist():  # each distinct (name, category) once
        n, c = t.names[k >> 32], t.cats[k & 0xFFFFFFFF]
        category = _COPY_CATEGORY.get(c) or categorize(n)
        cat_of.append(labels.setdefault(category, len(labels)))
        gemm.append(category == "gemm" and c == "kernel")
        fp32.append(gemm[-1] and gemm_on_tensor_cores(n) is False)
    keys = np.array(cat_of, np.int64)[inverse]
    comm = communication_mask(trace)[work]
    if comm.any():  # launched by a collective op, whatever the kernel's name
        keys = np.where(comm, labels.setdefault("communication", len(labels)), keys)
    by_cat = first_seen_sums(keys, dur, list(labels))
    gemm_us = seqsum(dur[np.array(gemm, bool)[inverse] & ~comm])
    fp32_us = seqsum(dur[np.array(fp32, bool)[inverse] & ~comm])
    return KernelFacts(source="kernels", time_by_category=per_step(by_cat, w), top=top_names(t, name, dur, w),
                       fp32_gemm_fraction=fp32_us / gemm_us if gemm_us else None)


def first_seen_sums(keys: np.ndarray, values: np.ndarray, labels: list[str]) -> dict[str, float]:
    """{label: the sum of its values in order}, the labels in the order they first appear in ``keys``."""
    if not len(keys):
        return {}
    _, first = np.unique(keys, return_index=True)
    totals = np.bincount(keys, weights=values, minlength=len(labels))
    return {labels[k]: float(totals[k]) for k in keys[np.sort(first)].tolist()}


def top_names(t: EventColumns, name: np.ndarray, dur: np.ndarray, w: Window, n: int = 15) -> list[KernelStat]:
    """The ``n`` names with the most time (ties: first seen first), per step."""
    if not len(name):
        return []
    used, first, inverse = np.unique(name, return_index=True, return_inverse=True)
    totals = np.bincount(inverse, weights=dur, minlength=len(used))
    counts = np.bincount(inverse, minlength=len(used))
    seen = np.argsort(first, kind="stable")
    ranked = sorted(seen.tolist(), key=lambda k: -totals[k])[:n]
    return [KernelStat(name=t.names[used[k]], time_s=float(totals[k]) / w.steps / 1e6, count=int(counts[k]) / w.steps,
                       category=categorize(t.names[used[k]])) for k in ranked]


def per_step(us_by_key: dict[str, float], w: Window) -> dict[str, float]:
    return {k: v / w.steps / 1e6 for k, v in sorted(us_by_key.items(), key=lambda kv: -kv[1])}


def _copies(trace: Trace, work: np.ndarray) -> list[Event]:
    t = trace.columns("device")
    return [event_at(t, i) for i in work[t.by_cat("gpu_memcpy")[work]].tolist()]


def pageable_memcpy(trace: Trace, work: np.ndarray, w: Window) -> PageableCopies:
    """Host-to-device copies from pageable memory: staged by the driver, blocking the host."""
    pageable = [e for e in _copies(trace, work) if "Pageable" in e.name and "HtoD" in e.name]
    return PageableCopies(
        count=len(pageable) / w.steps,
        bytes=sum(float(e.args.get("bytes", 0)) for e in pageable) / w.steps,
        time_s=sum(e.dur for e in pageable) / w.steps / 1e6,
    )


def host_transfers(trace: Trace, work: np.ndarray, w: Window) -> HostTransfers:
    """Every host↔device copy (pinned or pageable): bytes each way, device time, and the share of that time a
    kernel ran beside it (copies overlapping compute cost no step time)."""
    t = trace.columns("device")
    copies = [e for e in _copies(trace, work) if "HtoD" in e.name or "DtoH" in e.name]
    spans = merge([e.span for e in copies])
    kernels = work[t.by_cat("kernel")[work]]
    merged = merge(SpanArray(t.ts[kernels], t.end[kernels]))
    copy_us = length(spans)
    hidden_us = sum(overlap(span, merged) for span in spans)
    return HostTransfers(
        h2d_bytes=sum(float(e.args.get("bytes", 0)) for e in copies if "HtoD" in e.name) / w.steps,
        d2h_bytes=sum(float(e.args.get("bytes", 0)) for e in copies if "DtoH" in e.name) / w.steps,
        time_s=copy_us / w.steps / 1e6,
        overlapped_fraction=hidden_us / copy_us if copy_us > 0 else None,
    )


def collective_spans(trace: Trace, w: Window) -> tuple[np.ndarray, SpanArray, SpanArray]:
    """CUDA: the communication kernels the window issued (communication_mask: their device rows), their spans merged, and the other device work's spans merged
    (perfscope.trace.communication's collectives against compute)."""
    t = trace.columns("device")
    rows = trace.issued(*w.bounds)
    nccl = communication_mask(trace)[rows]
    runs, other = rows[nccl], rows[~nccl]
    return runs, merge(SpanArray(t.ts[runs], t.end[runs])), merge(SpanArray(t.ts[other], t.end[other]))

"""Chrome/Kineto trace → typed per-step facts (perfscope.results.trace_facts.TraceFacts).

Design notes: docs/trace.md."""

from __future__ import annotations

from pathlib import Path

from perfscope.results.messages import msg
from perfscope.results.trace_facts import HostTransfers, PageableCopies, TraceFacts
from perfscope.trace.events import Trace
from perfscope.trace.gpu import gpu_timeline, idle_after_waits, idle_gaps, launch_facts, starved_by
from perfscope.trace.host_ops import cpu_op_facts, gemm_shapes
from perfscope.trace.inputs import read_trace
from perfscope.trace.intervals import length
from perfscope.trace.kernels import host_transfers, kernel_facts, pageable_memcpy
from perfscope.trace.reader import unusable_note
from perfscope.trace.sync import blocked_spans, sync_facts
from perfscope.trace.window import DATA_LABEL, data_spans, step_notes, window


def trace_facts(trace_path: Path, *, device_type: str, steps: int, trace: Trace | None = None) -> TraceFacts:
    """Every fact family of one trace; ``steps`` is used only when the trace has no ProfilerStep#N spans.
    ``trace``: the file already read (a large trace is parsed once, not once per analyzer)."""
    trace = trace if trace is not None else read_trace(Path(trace_path))
    w = window(trace, steps)
    work = trace.issued(*w.bounds)
    on_device = device_type == "cuda" and bool(len(work))
    notes = step_notes(trace, w)
    broken = unusable_note(trace.unusable)
    if broken is not None:
        notes.append(broken)
    data = data_spans(trace, w)
    sync = sync_facts(trace, w)
    if on_device:
        blocked = blocked_spans(trace, w)
        gpu_gaps = idle_gaps(trace, w)
        timeline = gpu_timeline(trace, w, gpu_gaps, data=data, blocked=blocked)
        sync.gpu_idle_after_s = idle_after_waits(gpu_gaps, w, blocked)
        kernels, launch = kernel_facts(trace, work, w), launch_facts(trace, work, w, timeline, data=data, blocked=blocked)
        launch.starved_by = starved_by(trace, gpu_gaps, w, data=data, blocked=blocked)
        copies: PageableCopies | None = pageable_memcpy(trace, work, w)
        transfers: HostTransfers | None = host_transfers(trace, work, w)
    else:
        if device_type == "cuda":
            notes.append(msg("no_device_activity", read="facts from host ops"))
        (kernels, launch), timeline, copies, transfers = cpu_op_facts(trace, w, data), None, None, None
    return TraceFacts(
        device_type=device_type, steps=w.steps, step_time_s=w.step_us / 1e6,
        data_wait_fraction=min(1.0, length(data) / w.total_us), kernels=kernels, launch=launch, sync=sync,
        gpu=timeline, pageable_memcpy=copies, host_transfers=transfers, gemm_shapes=gemm_shapes(trace, w, on_device=on_device),
        trace_bytes=Path(trace_path).stat().st_size, notes=notes,
    )


__all__ = ["DATA_LABEL", "trace_facts"]

"""The profiled window of a trace: its ProfilerStep#N spans, what every per-step fact is read in and divided by.

Design notes: docs/trace.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfscope.results.messages import Message, msg
from perfscope.trace.events import Trace
from perfscope.trace.intervals import Span, clip, merge
from perfscope.trace.steps import PROFILER_STEPS

DATA_LABEL = "perfscope::data"
LOADER_PREFIX = "enumerate(DataLoader)#"
"""torch's own span around every DataLoader ``__next__`` (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`,
`..._MultiProcessingDataLoaderIter.__next__`), in every PyTorch trace: the loop waiting for its batch."""


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

    def mask(self, t: np.ndarray) -> np.ndarray:
        """contains() of each time in a column."""
        lo, hi = self.bounds
        return (t >= lo) & (t <= hi)


def window(trace: Trace, steps: int) -> Window:
    """The ProfilerStep#N spans; without them, the whole host timeline split into ``steps`` steps."""
    if trace.steps:
        w = Window(spans=merge(trace.steps), steps=len(trace.steps))
    else:
        host = [trace.columns(kind) for kind in ("cpu_ops", "runtime", "annotations")]
        if not sum(len(t) for t in host):
            host = [trace.columns("device")]
        starts = np.concatenate([t.ts for t in host])
        if not len(starts):
            raise ValueError("the trace has no complete events")
        ends = np.concatenate([t.end for t in host])
        w = Window(spans=[(float(starts.min()), float(ends.max()))], steps=max(steps, 1))
    if w.total_us <= 0:
        raise ValueError("the profiled window has no duration")
    return w


def step_notes(trace: Trace, w: Window) -> list[Message]:
    """Which steps were used, when not the trace's ProfilerStep#N spans."""
    if not trace.steps:
        return [msg("whole_span_as_steps", steps=w.steps)]
    found = trace.steps_from not in ("", PROFILER_STEPS)
    return [msg("steps_found_from", steps=w.steps, source=trace.steps_from)] if found else []


def labelled(trace: Trace, name: str) -> list[Span]:
    """The spans of the host record_function spans called ``name``."""
    t = trace.columns("annotations")
    rows = t.by_name(lambda n: n == name)
    return list(zip(t.ts[rows].tolist(), t.end[rows].tolist()))


def loader_spans(trace: Trace) -> list[Span]:
    """The spans of torch's DataLoader ``__next__`` marks (a user_annotation; a cpu_op in older torch)."""
    out: list[Span] = []
    for kind in ("annotations", "cpu_ops"):
        t = trace.columns(kind)
        if len(t):
            rows = t.by_name(lambda n: n.startswith(LOADER_PREFIX))
            out += zip(t.ts[rows].tolist(), t.end[rows].tolist())
    return out


def data_spans(trace: Trace, w: Window) -> list[Span]:
    """Host time waiting for data: inside perfscope::data spans (the loop's `next()` on the data iterator, as perfscope
    marks it) or torch's own DataLoader ``__next__`` spans."""
    return merge(clip(labelled(trace, DATA_LABEL) + loader_spans(trace), w.bounds))

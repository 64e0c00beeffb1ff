"""The profiled window of a trace: its ProfilerStep#N spans (else the steps it marks otherwise), what every per-step
fact is read in and divided by.

Design notes: docs/trace.md."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from perfscope.results.messages import Message, msg
from perfscope.trace.events import Trace
from perfscope.trace.intervals import Span, clip, merge

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


# ---- a trace without ProfilerStep#N spans (profiled without a schedule): its steps from other marks

OPTIMIZER_STEP = "Optimizer.step#"
MIN_MARKS = 3
WARMUP_RATIO = 2.0
"""A leading step this many times the median of the others is one-time set-up, not the loop."""
PROFILER_STEPS = "ProfilerStep#N spans"


def find_steps(trace: Trace) -> list[Span]:
    """The trace's steps, set on it (``trace.steps``, ``trace.steps_from``); [] when it marks none."""
    if trace.steps:
        trace.steps_from = PROFILER_STEPS
        return trace.steps
    found, how = _optimizer_steps(trace) or _repeated_marks(trace) or ([], "")
    if not found:
        return []
    kept, dropped = drop_warmup(found)
    trace.steps = kept
    trace.steps_from = how + (f"; the first {dropped} step(s) left out as one-time warm-up (over {WARMUP_RATIO:g}× the "
                              f"median of the rest)" if dropped else "")
    return kept


def _optimizer_steps(trace: Trace) -> tuple[list[Span], str] | None:
    for kind in ("annotations", "cpu_ops"):
        t = trace.columns(kind)
        if not len(t):
            continue
        rows = np.flatnonzero(t.by_name(lambda n: n.startswith(OPTIMIZER_STEP)))
        if len(rows) < 2:
            continue
        nid = Counter(t.name[rows].tolist()).most_common(1)[0][0]  # names are interned: one id each
        rows, name = rows[t.name[rows] == nid], t.names[nid]
        ends = sorted(t.end[rows].tolist())
        steps = [(a, b) for a, b in pairwise(ends) if b > a]
        if steps:
            return steps, (f"the {len(ends)} {name} spans, each step from the end of one to the end of the next "
                           "(the first iteration, before the first one ended, left out)")
    return None


def _repeated_marks(trace: Trace) -> tuple[list[Span], str] | None:
    t = trace.columns("annotations")
    if not len(t):
        return None
    order = np.lexsort((-t.dur, t.ts))
    reach = np.maximum.accumulate(t.end[order])
    top = np.ones(len(order), bool)
    top[1:] = t.ts[order][1:] >= reach[:-1]  # starts after every earlier annotation ended: inside none
    rows = order[top]
    counts = Counter(t.name[rows].tolist())
    best = [(n, c) for n, c in counts.most_common() if c >= MIN_MARKS]
    if not best:
        return None
    name = best[0][0]
    starts = sorted(t.ts[rows[t.name[rows] == name]].tolist())
    steps = [(a, b) for a, b in pairwise(starts) if b > a]
    if not steps:
        return None
    return steps, (f"the {len(starts)} record_function marks {t.names[name]!r}, each step from the start of one to the "
                   "start of the next")


def drop_warmup(steps: list[Span]) -> tuple[list[Span], int]:
    """The steps without the leading ones over WARMUP_RATIO × the median of the rest; how many were dropped."""
    dropped = 0
    while len(steps) - dropped >= 3:
        rest = [b - a for a, b in steps[dropped + 1:]]
        first = steps[dropped][1] - steps[dropped][0]
        if first <= WARMUP_RATIO * float(np.median(rest)):
            break
        dropped += 1
    return steps[dropped:], dropped

"""The training steps of a trace that has no ProfilerStep#N spans (profiled without a schedule).

Design notes: docs/trace.md."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np

from perfscope.trace.events import Trace
from perfscope.trace.intervals import Span

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


__all__ = ["OPTIMIZER_STEP", "PROFILER_STEPS", "drop_warmup", "find_steps"]

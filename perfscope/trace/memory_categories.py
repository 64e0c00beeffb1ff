"""A profiled window's memory by what holds it, from torch.profiler's own categorisation (works on CPU too).

Design notes: docs/trace.md."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfscope.results import MEMORY_CATEGORY_NAMES, MemoryBreakdown, MemoryCategories, from_jsonable

CATEGORIES = tuple(MEMORY_CATEGORY_NAMES)
PERSISTENT = ("parameter", "optimizer_state")
"""Categories of tensors that outlive a step: one born and freed inside the window is a temporary."""


def memory_text(m: MemoryCategories) -> str:
    held = ", ".join(f"{c.replace('_', ' ')} {_mb(b)}" for c, b in sorted(m.at_peak.items(), key=lambda i: -i[1]))
    return f"peak {_mb(m.peak_bytes)} on {m.device}, most of it {m.peak_category.replace('_', ' ')} ({held})"


def owners(m: MemoryCategories) -> MemoryBreakdown:
    """The breakdown by owner at the peak (what the memory rules and the report's chart read): the categories other
    than parameters, gradients and optimizer state are its activations and temporaries."""
    held = m.at_peak
    owned = {"parameter", "gradient", "optimizer_state"}
    return MemoryBreakdown(parameters=held.get("parameter", 0), gradients=held.get("gradient", 0),
                           optimizer_state=held.get("optimizer_state", 0),
                           activations_and_temporaries=sum(b for c, b in held.items() if c not in owned))


def read_memory(path: Path) -> MemoryCategories:
    """A breakdown written beside a trace (TraceCapture, memory=True); ValueError naming the file when it is not one."""
    try:
        return from_jsonable(MemoryCategories, json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a memory breakdown ({exc})") from exc


def _mb(n: int) -> str:
    return f"{n / 1e6:.3g} MB"


def profile_step_memory(step: Callable[[], Any], device: str) -> MemoryCategories:
    """Run ``step`` twice under a profiler of its own (a warm-up step, then the profiled one) and break the second
    down. Its own window, not the trace's: the with_stack that torch's categorisation needs multiplies a trace's
    size with python_function frames, which would crowd the trace past its cap and into its facts."""
    seen: list[MemoryCategories] = []
    with memory_window(device, seen) as prof:
        for _ in range(MEMORY_STEPS):
            step()
            prof.step()
    if not seen:
        raise RuntimeError("the profiler's memory window ended without a profiled step")
    return seen[0]


MEMORY_STEPS = 2
"""A memory window's steps: one warm-up, one profiled."""


def memory_window(device: str, seen: list[MemoryCategories]) -> Any:
    """The (not yet entered) torch.profiler of a memory window on ``device`` ("cpu", "cuda"): stepped at the end of
    each of its MEMORY_STEPS steps, it appends the profiled step's breakdown to ``seen`` (the hooks drive one
    from the user's loop, profile_step_memory from a trial's)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
                   profile_memory=True, record_shapes=True, with_stack=True,
                   on_trace_ready=lambda prof: seen.append(memory_breakdown(prof, device)))


def memory_breakdown(prof: Any, device: str) -> MemoryCategories:
    """The breakdown of ``prof`` (a torch.profiler.profile run with profile_memory, record_shapes and with_stack)
    on ``device`` ("cuda": the current one); raises ValueError naming the missing option (torch's message) when one
    is off."""
    import torch

    profile = prof._memory_profile()
    device = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else device
    return breakdown_of(profile.timeline, profile._categories.get, device)


def breakdown_of(timeline: Any, category_of: Any, device: str) -> MemoryCategories:
    """The coalescing of torch's MemoryProfileTimeline over ``timeline`` ((t_ns, Action, (key, version), bytes)
    tuples, t = -1 for pre-existing) with ``category_of(key, version)``, plus the temporary correction."""
    import torch
    from torch.profiler._memory_profiler import Action, TensorKey

    dev = torch.device(device)
    events = [e for e in timeline if e[2][0].device == dev]
    created = {e[2][0] for e in events if e[1] == Action.CREATE and isinstance(e[2][0], TensorKey)}
    destroyed = {e[2][0] for e in events if e[1] == Action.DESTROY}
    transient = created & destroyed

    levels = dict.fromkeys(CATEGORIES, 0)
    best = dict(levels)
    maxima = dict(levels)
    peak, reclassified = 0, 0

    def update(key: Any, version: int, delta: int) -> bool:
        """Book ``delta`` bytes; True when torch's persistent category was corrected to temporary."""
        category = category_of(key, version) if isinstance(key, TensorKey) else None
        category = "unknown" if category is None else category.name.lower()
        moved = category in PERSISTENT and key in transient
        levels["temporary" if moved else category] += int(delta)
        return moved

    for _, instant in itertools.groupby(events, key=lambda e: e[0]):  # the events of one timestamp
        for _, action, (key, version), numbytes in instant:
            if action in (Action.PREEXISTING, Action.CREATE):
                if update(key, version, numbytes):
                    reclassified += numbytes
            elif action == Action.INCREMENT_VERSION:
                update(key, version, -numbytes)
                update(key, version + 1, numbytes)
            elif action == Action.DESTROY:
                update(key, version, -numbytes)
            else:
                raise ValueError(f"unknown memory timeline action {action!r}")
        maxima = {c: max(maxima[c], b) for c, b in levels.items()}
        if (total := sum(levels.values())) > peak:
            peak, best = total, dict(levels)
    held = max(best, key=best.__getitem__) if peak else "unknown"
    return MemoryCategories(device=str(dev), peak_bytes=peak, peak_category=held, reclassified_bytes=reclassified,
                            at_peak={c: b for c, b in best.items() if b > 0}, max_bytes={c: b for c, b in maxima.items() if b > 0})

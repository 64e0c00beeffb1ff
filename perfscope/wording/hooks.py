"""The words of the hooks' and measure/'s messages (perfscope.wording's templates, split off to keep one concept a
module): what a watch alarm saw change, a clock that fell, the CUDA out-of-memory snapshot, the memory window.

    words(msg("watch_step_time", before=0.028, after=0.233))   # perfscope.wording.words: WORDING holds these
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.stats import fmt_ms


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def _oom_held(*, reserved: int, live: int, blocks: int, requested: int | None = None, sites: list[list[Any]] | None = None,
              snapshot: str | None = None) -> str:
    asked = f", asking for {_bytes(requested)} more" if requested else ""
    where = ("; most from " + ", ".join(f"{site} ({_bytes(n)})" for site, n in sites)) if sites else \
        "; who allocated them is unrecorded (history off)"
    return (f"at the OOM: {_bytes(reserved)} reserved, {_bytes(live)} in {blocks} live blocks{asked}{where}"
            + (f"; snapshot {snapshot} (pytorch.org/memory_viz)" if snapshot else ""))


def _clock_throttled(*, source: str, before: float | None, after: float | None, reasons: list[str]) -> str:
    parts = [f"{source} {before:.0f} → {after:.0f} MHz ({after / before - 1:+.0%})"] if before and after else []
    return "; ".join(parts + ([f"throttling: {', '.join(reasons)} (NVML)"] if reasons else []))



HOOKS: dict[str, str | Callable[..., str]] = {
    # what a watch alarm saw change (the changes of "watch_step_time_shifted"; perfscope.hooks.watch, hooks.clocks)
    "watch_step_time": lambda *, before, after: f"step time {fmt_ms(before)} → {fmt_ms(after)} ({after / before - 1:+.0%})",
    "watch_data_wait": "data wait {before:.0%} → {after:.0%} of the step",
    "watch_recompiles": "{graphs} torch.compile graph(s) compiled since the reference",
    "watch_data_wait_added": lambda *, wait, added: f"the wait for data is {wait / added:.0%} of the {fmt_ms(added)} added per step",
    "clock_throttled": _clock_throttled,
    # a CUDA out-of-memory (perfscope.measure.allocator_snapshot): the note, the summary, why there is none
    "cuda_oom": "CUDA out of memory on device {device}, {held}",
    "oom_held": _oom_held,
    "oom_snapshot_no_cuda": "no CUDA: no allocator snapshot on out-of-memory",
    "oom_snapshot_unavailable": "allocator snapshot unavailable: {error}",
    "oom_snapshot_failed": "allocator snapshot failed at the OOM: {error}",
    # why the hooks' memory window has no breakdown (perfscope.hooks.capture)
    "memory_window_profiler_running": "a torch.profiler was already running on this thread",
    "memory_window_ended_early": "the memory window ended before its profiled step",
}

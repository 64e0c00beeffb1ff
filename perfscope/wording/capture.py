"""The words of why a torch.profiler window left no trace (perfscope.wording's templates, split off to keep one
concept a module): TraceCapture.note (perfscope.trace.capture), which a trial's and the hooks' trace_not_captured
list.

    words(msg("trace_export_failed", error="OSError: disk full"))   # perfscope.wording.words: WORDING holds these
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CAPTURE: dict[str, str | Callable[..., Any]] = {
    "trace_empty": "the profiler produced an empty trace",
    "trace_too_large": lambda *, size, max_bytes: (
        f"trace of {size / 1e6:.0f} MB (gzipped) exceeds the {max_bytes / 1e6:.0f} MB cap: shorten the window"),
    "trace_export_failed": "trace export failed: {error}",
    "memory_breakdown_failed": "memory breakdown failed: {error}",
    "capture_profiler_running": "a profiler is already running on this thread: capture skipped (yours is left alone)",
    "profiler_start_failed": "the profiler could not start: {error}",
    "profiler_step_failed": "profiler step failed: {error}",
    "profiler_stop_failed": "profiler stop failed: {error}",
    "trace_window_incomplete": "no trace was produced (the window did not complete)",
}

"""The hooks' torch.profiler window over ``capture_steps`` of the user's loop (perfscope.trace.capture).

    window = CaptureWindow((10, 13), trace_dir=None)
    window.first                    # 9: one profiler warm-up step before the recorded ones
    window.start(); window.step(); ...; window.stop()
    window.trace_path               # <trace_dir>/rank<R>.json.gz, or None and `notes` say why

Steps inside the window are not timed (the profiler costs them); the trace is analysed at results time.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch


class CaptureWindow:
    """From `first` (one warm-up step before capture_steps where there is one, so the recorded steps do not pay
    the profiler's start-up) the profiler records exactly capture_steps."""

    def __init__(self, capture_steps: tuple[int, int], trace_dir: Path | None, *, memory: bool = False) -> None:
        start, stop = capture_steps
        self.capture_steps, self.trace_dir, self.memory = capture_steps, trace_dir, memory
        self.memory_path: Path | None = None
        """The window's memory by category (memory=True: perfscope.trace.memory_categories), once written."""
        self.first, self.stop_step = (start - 1 if start >= 2 else start), stop
        self.end = -1
        """The step the running capture ends at (its own count of steps may be longer than asked)."""
        self.capture: Any = None
        self.trace_path: Path | None = None
        self.notes: list[str] = []
        self.active_steps: Any = None

    def covers(self, index: int) -> bool:
        """Step ``index`` is profiled (or the profiler's warm-up): not timed."""
        return self.first <= index < max(self.end, self.stop_step)

    def after(self, index: int) -> int:
        """``index``, or the first step after the window when ``index`` falls in it."""
        return self.stop_step if self.first <= index < self.stop_step else index

    @property
    def running(self) -> bool:
        return self.capture is not None

    def start(self, device_type: str) -> bool:
        """Start profiling at step `first`; False when a profiler of the user's already runs (left alone)."""
        if torch.autograd._profiler_enabled():
            self.notes.append("a torch.profiler was already running on this thread: it was left alone, no capture")
            warnings.warn(
                "perfscope: a torch.profiler is already running; capture_steps skipped (your profiler is left alone)",
                RuntimeWarning, stacklevel=4,
            )
            return False
        from perfscope.trace.capture import TraceCapture

        trace_dir = self.trace_dir or Path(tempfile.mkdtemp(prefix="perfscope-trace-"))
        trace_dir.mkdir(parents=True, exist_ok=True)
        first, (start, stop) = self.first, self.capture_steps
        # trace_dir/rank<R>.json.gz, its ProfilerStep#N labelled by the optimizer step (capture_steps' numbering).
        capture = TraceCapture(trace_dir, device=device_type, first_step=first, wait=0, warmup=start - first,
                               active=stop - start, memory=self.memory)
        capture.__enter__()
        self.capture = capture
        needed = getattr(capture, "total_steps", None) or stop - first
        self.end = first + max(stop - first, needed)
        return True

    def step(self, index: int) -> None:
        """The end of step ``index`` while profiling; the capture stops after its last step."""
        self.capture.step()
        if index + 1 >= self.end:
            self.stop()

    def stop(self) -> None:
        capture, self.capture = self.capture, None
        capture.__exit__(None, None, None)
        self.trace_path, self.memory_path = capture.path, getattr(capture, "memory_path", None)
        self.active_steps = getattr(capture, "active_steps", None)
        if capture.path is None:
            self.notes.append(getattr(capture, "note", None) or "trace unavailable")

    def teardown(self) -> None:
        if self.capture is not None:
            try:
                self.stop()
            except Exception as exc:  # noqa: BLE001
                self.capture = None
                self.notes.append(f"trace capture failed: {type(exc).__name__}: {exc}")

    def missing(self) -> str:
        """Why there is no trace."""
        return "; ".join(self.notes) or "the capture window was not reached"

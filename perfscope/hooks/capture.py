"""The hooks' torch.profiler window over ``capture_steps`` of the user's loop (perfscope.trace.capture).
Design notes: docs/hooks.md."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from perfscope.measure.lazy_msg import msg

if TYPE_CHECKING:
    from perfscope.results import MemoryCategories
    from perfscope.results.messages import Message


class CaptureWindow:
    """From `first` (one warm-up step before capture_steps where there is one, so the recorded steps do not pay
    the profiler's start-up) the profiler records exactly capture_steps."""

    def __init__(self, capture_steps: tuple[int, int], trace_dir: Path | None, *, memory: bool = False,
                 categories: bool = False) -> None:
        start, stop = capture_steps
        self.capture_steps, self.trace_dir, self.memory = capture_steps, trace_dir, memory
        self.memory_path: Path | None = None
        """The window's memory by category (memory=True: perfscope.trace.memory_categories), once written."""
        self.first, self.stop_step = (start - 1 if start >= 2 else start), stop
        self.extra = 0
        """Steps after the trace's under the memory window (``categories``)."""
        if categories:  # loaded only when asked for: a disabled Profiler imports no results model
            from perfscope.trace.memory_categories import MEMORY_STEPS

            self.extra = MEMORY_STEPS
        self.end = -1
        """The step the running capture ends at (its own count of steps may be longer than asked), memory window included."""
        self.categories: MemoryCategories | None = None
        """The memory window's breakdown once it ended (``categories``); else None and `categories_error` says why."""
        self.categories_error: Message | None = None
        self._memory: Any = None  # the memory window's profiler while it runs
        self._seen: list[MemoryCategories] = []
        self.capture: Any = None
        self.trace_path: Path | None = None
        self.notes: list[Message] = []
        self.active_steps: Any = None
        self.device_type = "cpu"

    def covers(self, index: int) -> bool:
        """Step ``index`` is profiled (or the profiler's warm-up): not timed."""
        return self.first <= index < max(self.end, self.stop_step + self.extra)

    def after(self, index: int) -> int:
        """``index``, or the first step after the window when ``index`` falls in it."""
        last = self.stop_step + self.extra
        return last if self.first <= index < last else index

    @property
    def running(self) -> bool:
        return self.capture is not None or self._memory is not None

    def start(self, device_type: str) -> bool:
        """Start profiling at step `first`; False when a profiler of the user's already runs (left alone)."""
        if torch.autograd._profiler_enabled():
            self.notes.append(msg("profiler_already_running"))
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
        self.capture, self.device_type = capture, device_type
        needed = getattr(capture, "total_steps", None) or stop - first
        self.end = first + max(stop - first, needed) + self.extra
        return True

    def step(self, index: int) -> None:
        """The end of step ``index`` while profiling; the capture stops after its last step, then the memory window
        (``categories``) runs its own."""
        if self.capture is None:
            self._memory_step(index)
            return
        self.capture.step()
        if index + 1 >= self.end - self.extra:
            self.stop()
            if self.extra:
                self._memory_start()

    def _memory_start(self) -> None:
        if torch.autograd._profiler_enabled():
            self.categories_error = msg("memory_window_profiler_running")
            return
        from perfscope.trace.memory_categories import memory_window

        try:
            self._memory = memory_window(self.device_type, self._seen)
            self._memory.__enter__()
        except Exception as exc:  # noqa: BLE001 - the memory record is optional, the user's loop is not
            self._memory, self.categories_error = None, msg("exception", error=f"{type(exc).__name__}: {exc}")

    def _memory_step(self, index: int) -> None:
        """A memory-window step's end; the window's last breaks its profiled step down (torch's memory profile)."""
        if self._memory is None:
            return
        try:
            self._memory.step()
            if index + 1 >= self.end:
                self._memory_stop()
        except Exception as exc:  # noqa: BLE001
            self._memory_stop(f"{type(exc).__name__}: {exc}")

    def _memory_stop(self, error: str | None = None) -> None:
        prof, self._memory = self._memory, None
        try:
            if prof is not None:
                prof.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            error = error or f"{type(exc).__name__}: {exc}"
        self.categories = self._seen[0] if self._seen else None
        if self.categories is None:
            self.categories_error = msg("exception", error=error) if error else msg("memory_window_ended_early")

    def stop(self) -> None:
        capture, self.capture = self.capture, None
        capture.__exit__(None, None, None)
        self.trace_path, self.memory_path = capture.path, getattr(capture, "memory_path", None)
        self.active_steps = getattr(capture, "active", None)
        if capture.path is None:
            note = getattr(capture, "note", None)
            self.notes.append(note or msg("trace_unavailable"))

    def teardown(self) -> None:
        if self._memory is not None:
            self._memory_stop()
        if self.capture is not None:
            try:
                self.stop()
            except Exception as exc:  # noqa: BLE001
                self.capture = None
                self.notes.append(msg("trace_capture_failed", error=f"{type(exc).__name__}: {exc}"))

    def missing(self) -> Message:
        """Why there is no trace."""
        return msg("trace_not_captured", notes=list(self.notes))

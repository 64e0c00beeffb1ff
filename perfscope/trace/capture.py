"""A short, bounded torch.profiler window that never breaks the training loop it observes.

Design notes: docs/trace.md."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from perfscope.results import MemoryCategories, write_json
from perfscope.results.messages import Message, error, msg
from perfscope.trace.export import distributed_info, trace_file_name, write_trace
from perfscope.trace.memory_categories import memory_breakdown


class TraceCapture:
    """Profile ``wait + warmup + active`` steps, keep the ``active`` ones in ``trace_dir/rank<R>.json.gz``.

    ``first_step``: the training step (0-based) running when the capture starts, i.e. the profiler's step 0;
    the trace labels each step by it. ``warmup=0`` is allowed (torch's warning about it is silenced) for a
    window that starts at the loop's first steps.
    """

    def __init__(
        self, trace_dir: str | Path, *, device: str, first_step: int = 0, wait: int = 1, warmup: int = 1, active: int = 3,
        max_bytes: int = 50_000_000, memory: bool = False,
    ) -> None:
        self.trace_dir = Path(trace_dir)
        self.device = device
        self.first_step = first_step
        self.wait, self.warmup, self.active = wait, warmup, active
        self.max_bytes = max_bytes
        self.memory_wanted = memory
        """Profile memory too (with_stack, which torch's categorisation needs: a larger trace) and break it down."""
        self.memory: MemoryCategories | None = None
        self.memory_path: Path | None = None
        self.path: Path | None = None
        self.note: Message | None = None
        """Why the window left no trace (or no memory breakdown); None: it did."""
        self._prof: Any = None

    @property
    def total_steps(self) -> int:
        return self.wait + self.warmup + self.active

    @property
    def steps(self) -> list[int]:
        """The training steps the trace records (its ProfilerStep#N numbers)."""
        start = self.first_step + self.wait + self.warmup
        return list(range(start, start + self.active))

    def _export(self, prof: Any) -> None:
        """on_trace_ready: torch's Chrome trace to a temp file, then rewritten and gzipped into the trace folder."""
        if self.memory_wanted:
            self._memory(prof)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(raw))
                if raw.stat().st_size == 0:
                    self.note = msg("trace_empty")
                    return
                info = distributed_info()
                out_path = self.trace_dir / trace_file_name(info)
                write_trace(raw, out_path, first_step=self.first_step, info=info)
            size = out_path.stat().st_size
            if size > self.max_bytes:
                out_path.unlink()
                self.note = msg("trace_too_large", size=size, max_bytes=self.max_bytes)
                return
            self.path = out_path
        except Exception as exc:  # noqa: BLE001 - a failed export is a note, not a crash
            self.note = msg("trace_export_failed", error=error(exc))

    def _memory(self, prof: Any) -> None:
        """The window's memory by category into memory-rank<R>.json; a failure is a note, the trace goes on."""
        try:
            self.memory = memory_breakdown(prof, self.device)
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            path = self.trace_dir / f"memory-{trace_file_name(distributed_info()).split('.')[0]}.json"
            write_json(path, self.memory)
            self.memory_path = path
        except Exception as exc:  # noqa: BLE001 - a failed breakdown is a note, not a crash
            self.note = msg("memory_breakdown_failed", error=error(exc))

    def __enter__(self) -> TraceCapture:
        if torch.autograd.profiler._is_profiler_enabled:
            self.note = msg("capture_profiler_running")
            return self
        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
                steps = schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
            self._prof = profile(
                activities=activities,
                schedule=steps,
                on_trace_ready=self._export,
                # Shapes are what the GEMM-shape facts (the misaligned-GEMM rule) and gloo collectives' payload bytes
                # are read from; stacks (with_stack) only name a sync's Python line, and multiply the trace's size with
                # python_function frames, so they stay off; the window is a few steps and the file capped (max_bytes).
                record_shapes=True,
                profile_memory=self.memory_wanted, with_stack=self.memory_wanted,
            )
            self._prof.__enter__()
        except Exception as exc:  # noqa: BLE001
            self._prof = None
            self.note = msg("profiler_start_failed", error=error(exc))
        return self

    def step(self) -> None:
        if self._prof is None:
            return
        try:
            self._prof.step()
        except Exception as exc:  # noqa: BLE001
            self.note = msg("profiler_step_failed", error=error(exc))
            self._stop()

    def _stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - e.g. a double stop
                self.note = self.note or msg("profiler_stop_failed", error=error(exc))

    def __exit__(self, *exc: object) -> None:
        self._stop()
        if self.path is None and self.note is None:
            self.note = msg("trace_window_incomplete")

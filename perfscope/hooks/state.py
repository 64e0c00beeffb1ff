"""The Profiler's state, typed here, below the modules that read it, so none imports the Profiler
(perfscope.hooks.profiler) back.

    build_results(prof, ratios=True)                # perfscope.hooks.results reads the ProfilerState as it stands
    save_alone(prof._saving(), out_dir, final)      # Saving: the profiler's calls save() sequences

`ProfilerState` declares the Profiler's attributes once for all its mixins and perfscope.hooks.results.
`Handover`, a mixin of the Profiler, makes the Saving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections import Counter

    import torch

    from perfscope.hooks.capture import CaptureWindow
    from perfscope.hooks.clocks import BoundedSampler
    from perfscope.hooks.distributed import RankPlace
    from perfscope.hooks.flopstep import FlopStep
    from perfscope.hooks.loggers import Loggers
    from perfscope.hooks.ondemand import LiveControl
    from perfscope.hooks.tally import Reservoir, StepTally
    from perfscope.measure.clock import Clock
    from perfscope.measure.window import WindowRecorder
    from perfscope.results import Environment, Results, Window
    from perfscope.results.messages import Message


@dataclass(frozen=True)
class Saving:
    """What save() needs of the Profiler: its calls, read when save() sequences them (perfscope.hooks.save)."""

    close: Callable[[], None]
    results: Callable[[bool], Results | None]
    """``ratios`` → the run's Results (without the utilization ratios for a job's rank); None when disabled or failed."""
    failure: Callable[[], str | None]
    """The internal error that disabled the profiler, if any (a failed close() sets it)."""
    trace: Callable[[], Path | None]
    """The trace a capture window wrote (known once it ended)."""
    model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer | None
    device: torch.device
    gather_timeout_s: float
    key: str
    """What this save()'s rank summaries travel under: the same on every rank of a job."""
    saved: Callable[[Results], None] = lambda results: None
    """Called with the results just saved (the user's loggers get the run's figures)."""


class ProfilerState:
    """The Profiler's state, declared once for its mixins (Stepping, FrameworkCalls, Pausing, Handover): each reads
    and drives it; perfscope.hooks.profiler sets it."""

    # What the user passed.
    enabled: bool
    device: torch.device
    model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer | None
    name: str
    precision: str | None
    samples_per_step: int | None
    tokens_per_sample: int | None
    warmup_steps: int
    peak_tflops: float | None
    measure_ceiling: bool
    flush_every: int
    gather_timeout_s: float
    # The step/window state machine.
    _on: bool
    _place: RankPlace | None
    _clock: Clock
    _t0: float
    _started_at: str
    _step_index: int
    _windows: list[Window]
    _recorder: WindowRecorder | None
    _data_recorder: WindowRecorder | None
    _data_span: Any
    _tally: StepTally
    _reservoir: Reservoir
    _flop: FlopStep
    _first_marks: list[Any]
    _sampler: BoundedSampler | None
    _excluded: Counter[str]
    _excluded_s: Counter[str]
    _pause_reason: str | None
    _pause_t0: float
    _since_t: float
    _since_flush: int
    _batch_begun: bool
    _batch_hooks: bool
    _wrap_used: bool
    _data_hooked: bool
    _live_wraps: int
    _live: LiveControl
    _on_record: Callable[[Any], None]
    _poll_every: int
    _capture: CaptureWindow | None
    _graphs_at_start: int | None
    # What results() and save() read.
    _loader_config: dict[str, Any]
    _described_config: dict[str, Any]
    _declared: dict[str, Any]
    _results_notes: list[Message]
    _environment: Environment | None
    _failed: str | None
    _loggers: Loggers | None
    _instance: int
    _saves: int

    if TYPE_CHECKING:  # defined by the Profiler and its mixins
        def close(self) -> None: ...
        def _results(self, *, ratios: bool = True) -> Results | None: ...
        def _fail(self, where: str, exc: BaseException) -> None: ...
        def pause(self, reason: str = "paused") -> None: ...
        def resume(self) -> None: ...
        def _close_window(self) -> None: ...
        def _open_window(self) -> None: ...
        def _step_begun(self) -> bool: ...
        def _excluded_step(self, index: int) -> bool: ...


class Handover(ProfilerState):
    """The Profiler's Saving (a mixin)."""

    def _saving(self) -> Saving:
        """What perfscope.hooks.save needs of this profiler; each call is one more save() (its rank summaries' key)."""
        self._saves += 1
        return Saving(close=self.close, results=lambda ratios: self._results(ratios=ratios), failure=lambda: self._failed,
                      trace=lambda: self._capture.trace_path if self._capture is not None else None, model=self.model,
                      optimizer=self.optimizer, device=self.device, gather_timeout_s=self.gather_timeout_s,
                      key=f"perfscope/hooks/{self._instance}/{self._saves}",
                      saved=lambda r: self._loggers.final(r, self._step_index) if self._loggers is not None else None)

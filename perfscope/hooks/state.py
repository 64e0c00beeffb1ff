"""What the Profiler hands the modules that build and save its results: typed here, below all three, so neither
perfscope.hooks.results nor perfscope.hooks.save imports the Profiler (perfscope.hooks.profiler) back.

    build_results(prof._state(), ratios=True)      # RunState: a snapshot, read once at results time
    save_alone(prof._saving(), out_dir, final)      # Saving: the profiler's calls save() sequences

`ProfilerState` declares the Profiler's attributes once for all its mixins; these are the only views of them the
other modules get. `Handover`, a mixin of the Profiler, makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import perfscope.hooks.observe as observe

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
class RunState:
    """The Profiler at results time (perfscope.hooks.results reads nothing else).

    The counters, tally and FLOP step are the profiler's own objects (read, never driven); ``windows`` holds the
    open window's snapshot too."""

    # What the user passed.
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
    place: RankPlace | None
    # What it measured.
    clock: Clock
    t0: float
    """The profiler's start on ``clock.now()``: the run's wall time counts from it."""
    started_at: str
    steps_seen: int
    windows: list[Window]
    tally: StepTally
    reservoir: Reservoir
    flop: FlopStep
    first_marks: list[Any]
    sampler: BoundedSampler | None
    excluded: Mapping[str, int]
    excluded_s: Mapping[str, float]
    data_wait_measured: bool
    """wrap() or a framework's data_begin()/data_end() saw the fetches."""
    capture: CaptureWindow | None
    compile_seen: observe.Observation
    loader_config: Mapping[str, Any]
    described_config: Mapping[str, Any]
    declared: Mapping[str, Any]
    notes: list[Message]
    environment: Environment | None
    """Read by an earlier results() (the ceiling probe runs once); None the first time."""


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
    """The Profiler's RunState and Saving (a mixin)."""

    def _state(self) -> RunState:
        """The profiler as perfscope.hooks.results reads it: the open window as a snapshot (it waits for the pending
        events once; the window stays open), the rest as it stands."""
        windows = list(self._windows)
        if self._recorder is not None and self._recorder.started and (snapshot := self._recorder.finish()).steps:
            windows.append(snapshot)
        return RunState(
            device=self.device, model=self.model, optimizer=self.optimizer, name=self.name, precision=self.precision,
            samples_per_step=self.samples_per_step, tokens_per_sample=self.tokens_per_sample,
            warmup_steps=self.warmup_steps, peak_tflops=self.peak_tflops, measure_ceiling=self.measure_ceiling,
            place=self._place, clock=self._clock, t0=self._t0, started_at=self._started_at, steps_seen=self._step_index,
            windows=windows, tally=self._tally, reservoir=self._reservoir, flop=self._flop, first_marks=self._first_marks,
            sampler=self._sampler, excluded=dict(self._excluded), excluded_s=dict(self._excluded_s),
            data_wait_measured=self._wrap_used or self._data_hooked, capture=self._capture,
            compile_seen=observe.compile_state(self.model, self._graphs_at_start), loader_config=self._loader_config,
            described_config=self._described_config, declared=self._declared, notes=self._results_notes,
            environment=self._environment)

    def _saving(self) -> Saving:
        """What perfscope.hooks.save needs of this profiler; each call is one more save() (its rank summaries' key)."""
        self._saves += 1
        return Saving(close=self.close, results=lambda ratios: self._results(ratios=ratios), failure=lambda: self._failed,
                      trace=lambda: self._capture.trace_path if self._capture is not None else None, model=self.model,
                      optimizer=self.optimizer, device=self.device, gather_timeout_s=self.gather_timeout_s,
                      key=f"perfscope/hooks/{self._instance}/{self._saves}",
                      saved=lambda r: self._loggers.final(r, self._step_index) if self._loggers is not None else None)

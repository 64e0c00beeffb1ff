"""The Profiler's state, declared once for its mixins and for perfscope.hooks.results and perfscope.hooks.save,
below them all, so none imports the Profiler (perfscope.hooks.profiler) back."""

from __future__ import annotations

from collections.abc import Callable
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


class ProfilerState:
    """The Profiler's state: its mixins (Stepping, FrameworkCalls) read and drive it; perfscope.hooks.profiler
    sets it."""

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


"""A measured window: step boundaries, data waits and samples, recorded without per-step synchronization.

Design notes: docs/measurement.md."""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfscope.measure.clock import Clock
from perfscope.measure.contention import ContentionProbe
from perfscope.results.messages import Message, msg
from perfscope.results.model import TrialMetrics, Window
from perfscope.stats import summarize


@dataclass(slots=True)
class StepRecord:
    """One timed optimizer step, once its end boundary has been read."""

    index: int
    time_s: float
    data_wait_s: float
    """Exposed data wait (docs/measurement.md)."""
    host_data_wait_s: float
    samples: int | None
    micro_steps: int


@dataclass(slots=True)
class _Pending:
    index: int
    start: Any
    end: Any
    data_marks: list[tuple[Any, Any]]
    host_wait: float
    samples: int | None
    micro_steps: int


class WindowRecorder:
    """Records one window of contiguous timed steps (docs/measurement.md).

    Args:
        clock: HostClock or CudaClock (perfscope.measure.clock).
        on_step: called with each StepRecord as its boundary is read (default: kept in a list).
        contention: measure what other processes did during the window (psutil; NVML with nvml_handle).
        flush_every: with many pending CUDA marks, wait on an old one so at most ~2× this many pend.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        on_step: Callable[[StepRecord], None] | None = None,
        contention: bool = True,
        nvml_handle: object | None = None,
        flush_every: int = 50,
        first_index: int = 0,
    ) -> None:
        self.clock = clock
        self._now: Callable[[], float] = clock.now  # the host's waits, on the clock's own host time
        self.records: list[StepRecord] = []
        self._on_step = on_step or self.records.append
        self._contention = contention
        self._nvml_handle = nvml_handle
        self._flush_every = flush_every
        self._pending: deque[_Pending] = deque()
        self._probe: ContentionProbe | None = None
        self._first: Any = None
        self._prev: Any = None
        self._last: Any = None
        self._index = first_index
        self._data_marks: list[tuple[Any, Any]] = []
        self._data_open: Any = None
        self._host_t0 = 0.0
        self._host_wait = 0.0
        self.steps = 0
        self.samples: int | None = 0
        self.data_wait_s = 0.0
        self.host_data_wait_s = 0.0

    @property
    def started(self) -> bool:
        return self._first is not None

    def start(self) -> None:
        """The window's first boundary (call after any synchronization the caller needs)."""
        if self._contention:
            self._probe = ContentionProbe(self.clock.device_type, nvml_handle=self._nvml_handle)
        self._first = self._prev = self.clock.mark()

    def data_begin(self) -> None:
        self._host_t0 = self._now()
        self._data_open = self.clock.mark() if self.clock.device_type == "cuda" else None

    def data_end(self) -> None:
        self._host_wait += self._now() - self._host_t0
        if self._data_open is not None:
            self._data_marks.append((self._data_open, self.clock.mark()))
            self._data_open = None

    def step_end(self, samples: int | None = None, micro_steps: int = 1) -> None:
        """The boundary that ends one optimizer step (``samples`` processed in it, None when unknown)."""
        mark = self.clock.mark()
        self._pending.append(_Pending(self._index, self._prev, mark, self._data_marks, self._host_wait, samples, micro_steps))
        self._prev = self._last = mark
        self._index += 1
        self._data_marks, self._host_wait = [], 0.0
        if len(self._pending) > self._flush_every:
            self.poll()

    def poll(self, *, wait: bool = False) -> None:
        """Read the steps whose end boundary is done; ``wait`` for all of them. Without ``wait`` this blocks
        only when more than 2 × flush_every boundaries are still pending (a device far behind the host),
        and then on an old boundary, so the host stays ahead of the device."""
        pending, clock = self._pending, self.clock
        self._drain()
        if wait and pending:
            clock.wait(pending[-1].end)
        elif len(pending) > 2 * self._flush_every:
            clock.wait(pending[len(pending) - self._flush_every - 1].end)
        else:
            return
        self._drain()

    def _drain(self) -> None:
        pending, clock = self._pending, self.clock
        while pending and clock.ready(pending[0].end):
            p = pending.popleft()
            exposed = sum(clock.elapsed_s(a, b) for a, b in p.data_marks) if p.data_marks else p.host_wait
            record = StepRecord(p.index, clock.elapsed_s(p.start, p.end), exposed, p.host_wait, p.samples, p.micro_steps)
            self.steps += 1
            self.data_wait_s += record.data_wait_s
            self.host_data_wait_s += record.host_data_wait_s
            self.samples = None if self.samples is None or record.samples is None else self.samples + record.samples
            self._on_step(record)

    def finish(self) -> Window:
        """Read every pending boundary (one wait, on the last) and return the window."""
        contention = self._probe.finish() if self._probe is not None else None
        self.poll(wait=True)
        wall = self.clock.elapsed_s(self._first, self._last) if self._last is not None else 0.0
        return Window(
            steps=self.steps,
            samples=self.samples if self.steps else 0,
            wall_s=wall,
            data_wait_s=self.data_wait_s,
            host_data_wait_s=self.host_data_wait_s,
            contention=contention,
        )


class GcPauses:
    def __init__(self, step_of: Callable[[], int] | None = None) -> None:
        self.collections = 0
        self.pause_s = 0.0
        self._t0: float | None = None
        self._step_of = step_of
        self._by_step: dict[int, float] = {}

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            pause = time.perf_counter() - self._t0
            self.pause_s += pause
            self.collections += 1
            self._t0 = None
            if self._step_of is not None:
                step = self._step_of()
                self._by_step[step] = self._by_step.get(step, 0.0) + pause

    def per_step(self, steps: int) -> list[float]:
        """Seconds of collector pauses in each of the window's ``steps`` steps (empty without ``step_of``)."""
        if self._step_of is None:
            return []
        return [self._by_step.get(i, 0.0) for i in range(steps)]

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def window_totals(windows: Sequence[Window]) -> tuple[int, int | None, float]:
    """(steps, samples or None when any window's samples are unknown, wall seconds)."""
    steps = sum(w.steps for w in windows)
    wall = sum(w.wall_s for w in windows)
    samples = None if any(w.samples is None for w in windows) else sum(w.samples or 0 for w in windows)
    return steps, samples, wall


def assemble_metrics(
    windows: Sequence[Window],
    records: Sequence[StepRecord],
    *,
    micro_batch_size: int,
    grad_accum_steps: int,
    warmup_steps: int,
    samples_per_step: int | None = None,
    tokens_per_sample: int | None = None,
    step_times_sampled: bool = False,
) -> TrialMetrics:
    """TrialMetrics with every rate from work / wall time; FLOPs, memory and MFU are filled in later."""
    steps, samples, wall = window_totals(windows)
    unavailable: dict[str, Message] = {}
    samples_per_s = samples / wall if samples is not None and wall > 0 else None
    if samples is None:
        unavailable["samples_per_s"] = msg("samples_per_step_unknown")
    elif wall <= 0:
        unavailable["samples_per_s"] = msg("no_timed_step")
    times = [r.time_s for r in records]
    metrics = TrialMetrics(
        steps=steps,
        warmup_steps=warmup_steps,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        samples_per_step=samples_per_step if samples_per_step is not None else micro_batch_size * grad_accum_steps,
        windows=list(windows),
        samples_per_s=samples_per_s,
        wall_s=wall,
        data_wait_share=min(1.0, sum(w.data_wait_s for w in windows) / wall) if wall > 0 else 0.0,
        host_data_wait_share=min(1.0, sum(w.host_data_wait_s for w in windows) / wall) if wall > 0 else 0.0,
        step_times_s=times,
        step_data_wait_s=[r.data_wait_s for r in records],
        step_times_sampled=step_times_sampled,
        typical_step=summarize(times) if times else None,
        unavailable=unavailable,
    )
    if tokens_per_sample and samples_per_s is not None:
        metrics.tokens_per_s = samples_per_s * tokens_per_sample
    return metrics

"""The Profiler's step/window state machine (a mixin; the public API is perfscope.hooks.profiler): each step
boundary decides whether the step it starts is timed — not during warm-up, a capture window, the FLOP-counting
step or a pause — and opens, keeps or closes the timed window; pause() / resume() take work between steps out of
it, reported apart by reason. Design notes: docs/hooks.md."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from perfscope.hooks.framework import DATA_SPAN
from perfscope.hooks.state import ProfilerState


class Stepping(ProfilerState):
    """_wrapped(), _end_step(), pause(), resume() and the timed windows they open and close."""

    def _step_begun(self) -> bool:
        """The step in progress has started its compute: timing it from now would count part of it."""
        return self._tally.begun or self._batch_begun

    def _excluded_step(self, index: int) -> bool:
        in_capture = (self._capture is not None and self._capture.covers(index)) or self._live.covers(index)
        return in_capture or (index == self._flop.index and self._flop.wanted)

    def _wrapped(self, loader: Iterable[Any]) -> Iterator[Any]:
        it = iter(loader)
        self._live_wraps += 1
        try:
            while True:
                recorder = self._recorder if self._on else None
                if self._on and self._step_index == 0 and not self._first_marks and self._tally.yields == 0:
                    self._first_marks.append(self._clock.mark())
                # The span trace facts book as data wait (perfscope.trace.facts.DATA_LABEL), as analyze's loop marks it.
                with torch.profiler.record_function(DATA_SPAN):
                    if recorder is not None:
                        recorder.data_begin()
                    try:
                        batch = next(it)  # the user's errors propagate untouched
                    except StopIteration:
                        return
                    if recorder is not None:
                        recorder.data_end()
                if self._on:
                    try:
                        self._tally.batch(batch)
                        # after next() returned: the data loading is not under the dispatch mode
                        self._flop.start_if_armed(self.model, self.device.type)
                    except Exception as exc:  # noqa: BLE001
                        self._fail("wrap()", exc)
                yield batch
        finally:
            self._live_wraps -= 1

    def _end_step(self, samples: int | None) -> None:
        k = self._step_index
        if k == 0 and self._place is None:
            from perfscope.hooks.distributed import find_place  # it loads the results model

            self._place = find_place()
        # Costly end-of-step work first, so it lands in this (untimed) step, not in the next one.
        flop_step = self._flop.running
        if flop_step:
            self._flop.stop(k)
        capture, live = self._capture, self._live
        if capture is not None and capture.running:
            self._excluded["profiler capture"] += 1
            capture.step(k)
        if live.flag and live.running:
            self._excluded["on-demand capture"] += 1
            live.end_of_step(k)
        counted, micro = self._tally.end_step(samples)
        if flop_step:
            self._excluded["FLOP counting"] += 1
            self._flop.counted_samples(counted)
        if k == 0 and len(self._first_marks) == 1:
            self._first_marks.append(self._clock.mark())
        if self._recorder is not None:
            self._recorder.step_end(samples=counted, micro_steps=micro)
            self._tally.timed(counted, micro)
        self._batch_begun = False
        self._since_t = self._clock.now()
        self._step_index = k = k + 1
        # The boundary just marked starts step k: open, keep or close the window for it.
        if k == self.warmup_steps:
            # The first timed step: start what only a run past its warm-up needs (sampler thread, capture requests),
            # the sampler before the window's first mark: its thread's start-up is not timed.
            if self._sampler is not None:
                self._sampler.start()
            self._live.start()
        if live.flag:
            live.take(k)  # a request waiting: the steps it covers are not timed
        timed = k >= self.warmup_steps and not self._excluded_step(k) and self._pause_reason is None
        if timed and self._recorder is None:
            self._open_window()
        elif not timed and self._recorder is not None:
            self._close_window()
        # Start-of-step work for step k (after the boundary: it belongs to that untimed step).
        if (capture is not None and k == capture.first and capture.start(self.device.type)
                and self._flop.flops is None and self._flop.index < capture.end):
            self._flop.index = capture.end  # count FLOPs outside the profiled window (and its memory steps)
        if live.flag and live.begin(k, self.device.type) and self._flop.index in range(k, live.end):
            self._flop.index = live.end
        if k == self._flop.index and self._flop.wanted:
            if self._live_wraps or self._batch_hooks:
                self._flop.armed = True  # entered when wrap() yields the next batch, or at the next batch_begin()
            else:
                self._flop.start(self.model, self.device.type)
        self._since_flush += 1
        if self._since_flush >= self._poll_every:
            self._since_flush = 0
            if self._recorder is not None:
                self._recorder.poll()
            if self._sampler is not None:
                self._sampler.check()

    def _open_window(self) -> None:
        from perfscope.measure.window import WindowRecorder  # a disabled Profiler imports nothing heavy

        handle = self._sampler.nvml_handle if self._sampler is not None else None
        self._recorder = WindowRecorder(self._clock, on_step=self._on_record, nvml_handle=handle,
                                        flush_every=self.flush_every, first_index=self._step_index)
        self._recorder.start()

    def _close_window(self) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is not None and recorder.started:
            window = recorder.finish()
            if window.steps:
                self._windows.append(window)

    def pause(self, reason: str = "paused") -> None:
        """Stop timing until `resume()`: evaluation, checkpoint saving, logging — work that is not a training step.

        The open window ends at the last step boundary, and the paused time, reported apart by reason, counts
        from there (or from the last resume) when the step in progress had not begun its compute: what a
        framework does between a step's end and its evaluation is the evaluation's. A pause for another reason
        while paused (evaluation, then the checkpoint it triggers) ends the first reason's share there.
        """
        if not self._on or self._pause_reason == reason:
            return
        try:
            if self._pause_reason is not None:
                self._pause_t0 = self._count_pause()
            else:
                self._close_window()
                if self._flop.running:
                    self._flop.discard(self._step_index, reason)
                self._pause_t0 = self._clock.now() if self._step_begun() else self._since_t
            self._pause_reason = reason
        except Exception as exc:  # noqa: BLE001
            self._fail("pause()", exc)

    def resume(self) -> None:
        """Timing restarts with the step in progress (its start is this call), or with the next one when the
        step in progress had already begun its compute before the pause (a step timed in part is no step)."""
        if not self._on or self._pause_reason is None:
            return
        try:
            self._since_t = self._count_pause()
            self._pause_reason = None
            if self._step_index >= self.warmup_steps and not self._excluded_step(self._step_index) and not self._step_begun():
                self._open_window()
        except Exception as exc:  # noqa: BLE001
            self._fail("resume()", exc)

    def _count_pause(self) -> float:
        """The pause so far reported apart under its reason; returns now."""
        now = self._clock.now()
        self._excluded_s[self._pause_reason] += now - self._pause_t0  # type: ignore[index]
        self._excluded[self._pause_reason] += 1  # type: ignore[index]
        return now

    @contextmanager
    def paused(self, reason: str = "paused") -> Iterator[None]:
        """``with prof.paused("evaluation"): evaluate()``."""
        self.pause(reason)
        try:
            yield
        finally:
            self.resume()

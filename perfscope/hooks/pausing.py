"""pause() / resume() and ``with prof.paused("evaluation"):``: work between steps that is not a training step,
its time reported apart by reason. A mixin of the Profiler; design notes: docs/hooks.md."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from perfscope.hooks.state import ProfilerState


class Pausing(ProfilerState):
    """pause(), resume(), paused()."""

    def pause(self, reason: str = "paused") -> None:
        """Stop timing until `resume()`: evaluation, checkpoint saving, logging — work that is not a training step.

        The open window ends at the last step boundary, and the paused time, reported apart by reason, counts
        from there (or from the last resume) when the step in progress had not begun its compute: what a
        framework does between a step's end and its evaluation is the evaluation's. A pause for another reason
        while paused (evaluation, then the checkpoint it triggers) ends the first reason's share there.
        """
        if not self._on or self._pause_reason == reason:
            return
        if self._pause_reason is not None:
            now = self._clock.now()
            self._excluded_s[self._pause_reason] += now - self._pause_t0
            self._excluded[self._pause_reason] += 1
            self._pause_reason, self._pause_t0 = reason, now
            return
        try:
            self._close_window()
            if self._flop.running:
                self._flop.discard(self._step_index, reason)
            self._pause_reason = reason
            self._pause_t0 = self._clock.now() if self._step_begun() else self._since_t
        except Exception as exc:  # noqa: BLE001
            self._fail("pause()", exc)

    def resume(self) -> None:
        """Timing restarts with the step in progress (its start is this call), or with the next one when the
        step in progress had already begun its compute before the pause (a step timed in part is no step)."""
        if not self._on or self._pause_reason is None:
            return
        try:
            now = self._clock.now()
            self._excluded_s[self._pause_reason] += now - self._pause_t0
            self._excluded[self._pause_reason] += 1
            self._pause_reason = None
            self._since_t = now
            if self._step_index >= self.warmup_steps and not self._excluded_step(self._step_index) and not self._step_begun():
                self._open_window()
        except Exception as exc:  # noqa: BLE001
            self._fail("resume()", exc)

    @contextmanager
    def paused(self, reason: str = "paused") -> Iterator[None]:
        """``with prof.paused("evaluation"): evaluate()``."""
        self.pause(reason)
        try:
            yield
        finally:
            self.resume()

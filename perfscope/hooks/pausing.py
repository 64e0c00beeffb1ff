"""pause() / resume(): work between steps that is not a training step (evaluation, checkpoint saving, logging).

    with prof.paused("evaluation"): evaluate()

A mixin of the Profiler (as perfscope.hooks.framework's calls are): the open window ends at the last step boundary,
the paused time is reported apart by reason (``excluded_s``), and timing restarts with a step not yet begun.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfscope.hooks.flopstep import FlopStep
    from perfscope.measure.clock import Clock


class Pausing:
    """pause(), resume(), paused()."""

    # The Profiler's state these calls read and drive.
    warmup_steps: int
    _on: bool
    _clock: Clock
    _flop: FlopStep
    _step_index: int
    _since_t: float
    _pause_reason: str | None
    _pause_t0: float
    _excluded: Counter[str]
    _excluded_s: Counter[str]

    if TYPE_CHECKING:  # the Profiler's own
        def _fail(self, where: str, exc: BaseException) -> None: ...
        def _close_window(self) -> None: ...
        def _open_window(self) -> None: ...
        def _step_begun(self) -> bool: ...
        def _excluded_step(self, index: int) -> bool: ...

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

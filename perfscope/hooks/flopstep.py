"""The one step of the user's loop the hooks count FLOPs and structure on (a dispatch mode: slow, so untimed).

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

import perfscope.hooks.observe as observe
from perfscope.measure.lazy_msg import msg, words

if TYPE_CHECKING:  # imported when counted: `import perfscope.hooks` stays light (no results model)
    from perfscope.measure.observation import FlopCount, Unavailable
    from perfscope.results.messages import Message

MAX_FLOP_RESTARTS = 5
"""FLOP counts discarded because a pause fell inside the counted step, before giving up on counting."""


class FlopStep:
    """The counted step's state: which step, the counter while it runs, and what it counted."""

    def __init__(self, *, index: int, count_flops: bool, user_flops: float | None) -> None:
        self.index = index
        """The step to count (moves past a capture window, or on when a pause spoiled a count)."""
        self.count_flops, self.user_flops = count_flops, user_flops
        self.armed = False
        """Entered when the next batch is in hand (wrap() yields it, or a framework's batch_begin())."""
        self.counter: Any = None
        self.observer: observe.StepObserver | None = None
        self.flops: tuple[float, int | None, list[str]] | None = None
        """(model FLOPs, samples in the counted step, notes)."""
        self.hardware_per_model = 1.0
        self.unavailable: Message | None = None
        self.restarts: list[Message] = []
        self.fingerprint: Any = None
        self.precision_seen: observe.Observation | None = None

    @property
    def wanted(self) -> bool:
        """A count is still to be made."""
        return self.count_flops and self.user_flops is None and self.unavailable is None and self.flops is None

    @property
    def running(self) -> bool:
        return self.counter is not None

    def start(self, model: torch.nn.Module | None, device_type: str) -> None:
        # The structure counter holds the FLOP counter: one dispatch-mode step gives FLOPs and the fingerprint.
        from perfscope.measure.structure import StructureCounter

        observer = observe.StepObserver(model, device_type)
        observer.__enter__()  # before the dispatch mode: compiled code runs eagerly under it
        self.observer = observer
        counter = StructureCounter(device_type)
        try:
            counter.__enter__()
        except BaseException:
            self.stop_observer()  # the compiler's stance and the forward hook are the user's again
            raise
        self.counter = counter

    def start_if_armed(self, model: torch.nn.Module | None, device_type: str) -> None:
        """The step's batch is in hand: an armed count starts now."""
        if self.armed:
            self.armed = False
            self.start(model, device_type)

    def stop_observer(self) -> observe.StepObserver | None:
        observer, self.observer = self.observer, None
        if observer is not None:
            observer.__exit__(None, None, None)
        return observer

    def discard(self, step_index: int, reason: str) -> None:
        """A pause inside the counted step: its count would include the paused work, so the next step is counted."""
        counter, self.counter = self.counter, None
        counter.__exit__(None, None, None)
        self.stop_observer()
        self.restarts.append(msg("flop_step_discarded", step=step_index, reason=reason))
        if len(self.restarts) >= MAX_FLOP_RESTARTS:
            self.unavailable = msg("flop_count_paused", reason=reason, tries=len(self.restarts))
        else:
            self.index = step_index + 1

    def stop(self, step_index: int) -> None:
        counter, self.counter = self.counter, None
        counter.__exit__(None, None, None)
        observer = self.stop_observer()
        notes = list(counter.flop_counter.notes)
        method = f"the FLOP-counting step (step {step_index}) of your loop, counted under a dispatch mode"
        if observer is not None:
            self.precision_seen = observer.precision(dict(counter.flops_by_dtype))
            if observer.forced_eager and observe.graphs_compiled():
                notes.append(msg("flops_counted_eagerly"))
                method += "; " + words(notes[-1])
        flops = counter.flop_counter
        self.hardware_per_model = flops.total / flops.model_total if flops.model_total else 1.0
        self.flops = (flops.model_total, None, notes)
        self.fingerprint = counter.fingerprint(method=method)

    def counted_samples(self, samples: int | None) -> None:
        """The counted step's samples, known once the step ended."""
        if self.flops is not None:
            self.flops = (self.flops[0], samples, self.flops[2])

    def teardown(self) -> None:
        """Leave no dispatch mode or compiler stance behind (each on its own: one failure is not all)."""
        self.armed = False
        if self.counter is not None:
            counter, self.counter = self.counter, None
            with contextlib.suppress(Exception):
                counter.__exit__(None, None, None)
            self.unavailable = self.unavailable or msg("run_ended_in_flop_step")
        with contextlib.suppress(Exception):
            self.stop_observer()  # whether or not the counter started: the stance must not outlive the Profiler

    def count(self, samples_per_step: int | None) -> FlopCount | Unavailable:
        """FLOPs per optimizer step: the user's, else the counted step's scaled to the typical step's samples."""
        from perfscope.measure.observation import FlopCount, Unavailable

        if self.user_flops is not None:
            return FlopCount(model=float(self.user_flops), convention="user supplied (Profiler(flops_per_step=...))")
        if self.flops is None:
            if self.unavailable is not None:
                return Unavailable(self.unavailable)
            if not self.count_flops:
                return Unavailable(msg("hooks_flops_disabled"))
            return Unavailable(msg("flop_step_not_reached", step=self.index))
        total, counted_samples, notes = self.flops
        notes = list(notes)
        if counted_samples and samples_per_step and counted_samples != samples_per_step:
            total = total * samples_per_step / counted_samples
            notes.append(msg("flops_scaled", counted=counted_samples, per_step=samples_per_step))
        if self.restarts:
            notes.append(msg("flops_counted_again", discarded=list(self.restarts)))
        notes.append(msg("flops_counted_in_loop"))
        # attention's recompute kept in HFU
        return FlopCount(model=total, hardware=total * self.hardware_per_model, notes=notes)

    def structure(self, flops: FlopCount | Unavailable) -> Any:
        """The fingerprint counted at this step, or why there is none."""
        from perfscope.measure.observation import Unavailable

        if self.fingerprint is not None:
            return self.fingerprint
        why = flops.reason if isinstance(flops, Unavailable) else msg("step_not_counted")
        return Unavailable(msg("counted_at_flop_step", why=why))

"""The Profiler's calls for frameworks that own the training loop (perfscope.hooks.integrations): a framework has
no `wrap()` to time next() in and no place for `pause()`, so it reports each event after the fact, through its
callbacks, and drives the same step/window state machine the plain loop does. A mixin of the Profiler."""

from __future__ import annotations

from typing import Any

import torch

import perfscope.hooks.observe as observe
from perfscope.hooks.state import ProfilerState

DATA_SPAN = "perfscope::data"
"""perfscope.trace.facts.DATA_LABEL (not imported: it loads the results model): the span trace facts book as data wait."""
PRECISIONS = ("fp32", "bf16", "fp16")


def check_precision(precision: str | None) -> None:
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"Profiler(precision=...) must be 'fp32', 'bf16', 'fp16' or None, got {precision!r}")


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """A DataLoader's settings as TrialConfig names them; None for anything else."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return None
    return {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
            "prefetch_factor": loader.prefetch_factor, "persistent_workers": loader.persistent_workers}


class FrameworkCalls(ProfilerState):
    """batch_begin(), data_begin()/data_end(), exclude_since_step(), describe(), describe_loader()."""

    def batch_begin(self) -> None:
        """A batch's compute starts now, its data in hand: for frameworks that own the loop (Lightning's
        on_train_batch_start, the Trainer's on_step_begin). Once used, the FLOP-counting step's count starts at
        its first batch_begin(), so what a framework runs between steps (logging, evaluation, checkpoint saving,
        fetching the next batch) is never counted as the step's work."""
        if not self._on:
            return
        self._batch_hooks = self._batch_begun = True
        try:
            if self._step_index == 0 and not self._first_marks:
                self._first_marks.append(self._clock.mark())
            self._flop.start_if_armed(self.model, self.device.type)
        except Exception as exc:  # noqa: BLE001
            self._fail("batch_begin()", exc)

    def data_begin(self) -> None:
        """The loop starts waiting for its next batch (a framework's fetch hook); `data_end()` when it has it.
        The wait is measured as `wrap()` measures next(): exposed on the device timeline, blocked on the host."""
        if not self._on:
            return
        self._data_hooked = True
        self._data_recorder = self._recorder
        self._end_data_span()  # a fetch that never ended is not this one's
        self._data_span = torch.profiler.record_function(DATA_SPAN)
        self._data_span.__enter__()
        if self._recorder is not None:
            self._recorder.data_begin()

    def data_end(self) -> None:
        """The batch asked for at `data_begin()` is in hand (a wait that straddles a pause is not counted)."""
        if not self._on:
            return
        recorder, self._data_recorder = self._data_recorder, None
        if recorder is not None and recorder is self._recorder:
            recorder.data_end()
        self._end_data_span()

    def _end_data_span(self) -> None:
        span, self._data_span = self._data_span, None
        if span is not None:
            span.__exit__(None, None, None)

    def exclude_since_step(self, reason: str) -> None:
        """The time since the last step boundary (or resume) was not training, reported apart under ``reason``:
        for frameworks that report evaluation or checkpoint saving once done (the Trainer's on_evaluate, on_save)."""
        if not self._on or self._pause_reason is not None:
            return
        self.pause(reason)
        self.resume()

    def describe(self, *, declared: dict[str, Any] | None = None, **config: Any) -> None:
        """Settings the profiler cannot observe but a framework knows: TrialConfig fields (``precision``,
        ``num_workers``, ``activation_checkpointing``, ``compile``, ...) recorded as the loop's configuration, and
        free-form ``declared`` settings (strategy, devices, the framework's own precision name) shown in the report."""
        if not self.enabled:
            return
        from dataclasses import fields

        from perfscope.results import TrialConfig  # here: a disabled Profiler never loads the results model

        if unknown := sorted(set(config) - {f.name for f in fields(TrialConfig)}):  # a typo would describe nothing
            raise ValueError(f"Profiler.describe(): not TrialConfig fields: {', '.join(unknown)}")
        if "precision" in config:
            check_precision(config["precision"])
            self.precision = config["precision"]
        self._described_config.update({k: v for k, v in config.items() if v is not None and k != "precision"})
        self._declared.update(declared or {})
        if config.get("compile") and self._flop.wanted:
            self._flop.unavailable = observe.compiled_flops_unavailable("the model runs under torch.compile")

    def describe_loader(self, loader: Any) -> None:
        """Record a DataLoader's settings (workers, pinned memory, ...) as the loop's: `wrap()` does it itself;
        a framework adapter passes the loader its trainer iterates."""
        if self.enabled and (settings := loader_settings(loader)) is not None:
            self._loader_config = settings

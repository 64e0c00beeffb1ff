"""Profiling hooks for a training loop you already have: the metrics of `perfscope analyze`, no toggling.

    prof = perfscope.Profiler(model, optimizer=opt, device="cuda", name="my-run")
    for batch in prof.wrap(loader):          # measures the time blocked in next(loader)
        loss = compute_loss(model, batch); loss.backward(); opt.step(); opt.zero_grad()
        prof.step()                           # the end of one OPTIMIZER step (or `with prof.step_context():`)
    prof.save("run/")                         # results.json + findings + report.html

A thin façade over the measurement core that `perfscope analyze` uses (docs/hooks.md has the long version):
- Step boundaries and data waits are recorded by perfscope.measure.window on the clock of
  perfscope.measure.clock (CUDA events read lazily, never a device-wide synchronize), in windows of
  contiguous timed steps; throughput is samples / wall time of the windows (perfscope.measure.metrics).
- The first `warmup_steps` optimizer steps are not timed; neither are the step that counts FLOPs (a slow
  Python dispatch mode, once, after warm-up), the steps of a `capture_steps` profiler window, and anything
  between `pause()` and `resume()` (evaluation, checkpoint saving): each of them closes the window, and
  the next timed step opens a new one. Their wall time is reported apart (`excluded_s`, by reason).
- Frameworks that own the loop (perfscope.hooks.integrations) drive the same profiler through their
  callbacks: `batch_begin()` where a step's compute starts (the FLOP count starts there, so nothing a
  framework runs between steps is counted), `data_begin()`/`data_end()` around their fetches,
  `exclude_since_step()` for work they report once done, `describe()` for the settings they know.
- Samples per step: the first dimension of the first tensor in each batch `wrap()` yields, summed over the
  micro-batches of the step, unless `samples_per_step=` is given. Per-step times kept for the description
  of a typical step are a uniform reservoir sample (seeded) of at most `max_step_samples` steps.

In a torchrun job (an initialized process group of more than one rank) every rank measures its own window, with
no per-step synchronization; at save(), which every rank calls, rank 0 gathers their summaries and writes the
job's one results.json (perfscope.hooks.distributed; docs/hooks.md, "Distributed (torchrun)").

Safe to leave in production code: `enabled=False` or PERFSCOPE_DISABLE=1 makes `wrap()` return the loader's
own iterator and `step()` a no-op; an internal error becomes one `warnings.warn` and the profiler disables
itself; it never reads a loss, resets allocator statistics or draws from the user's random generators.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from perfscope.hooks import observe
from perfscope.measure.samples import (
    leading_dim,  # re-exported: the integrations count samples the same way
)

if TYPE_CHECKING:
    from perfscope.hooks.distributed import RankPlace, RankReport
    from perfscope.measure.window import StepRecord, WindowRecorder
    from perfscope.results import Environment, Results, Window, WorkloadInfo

DISABLE_ENV = "PERFSCOPE_DISABLE"
DATA_SPAN = "perfscope::data"
"""perfscope.trace.facts.DATA_LABEL (not imported: it loads the results model): the span trace facts book as data wait."""
_MAX_FLOP_RESTARTS = 5
"""FLOP counts discarded because a pause fell inside the counted step, before giving up on counting."""
_TRUTHY = {"1", "true", "yes", "on"}
_INSTANCES = itertools.count()
"""Profilers made in this process: with the save count, the key a rank's summary travels under (ranks make their
profilers in the same order, so rank 0 asks for the keys the others wrote)."""


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in _TRUTHY


class _Reservoir:
    """A uniform sample of at most ``capacity`` step records from a stream of unknown length (algorithm R).

    Seeded with our own generator (the user's random streams are untouched); `in_order()` restores the timeline.
    """

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.seen = 0
        self.items: list[StepRecord] = []
        self._rng = random.Random(seed)

    def add(self, item: StepRecord) -> None:
        self.seen += 1
        if len(self.items) < self.capacity:
            self.items.append(item)
            return
        j = self._rng.randrange(self.seen)
        if j < self.capacity:
            self.items[j] = item

    def in_order(self) -> list[StepRecord]:
        return sorted(self.items, key=lambda s: s.index)


def _most_common(counter: Counter[int]) -> int | None:
    return counter.most_common(1)[0][0] if counter else None


def _resolve_device(device: str | torch.device | None, model: torch.nn.Module | None) -> torch.device:
    if device in (None, "auto"):
        param = next(model.parameters(), None) if model is not None else None
        if param is not None:
            return param.device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return resolved


class Profiler:
    """Measure a training loop you already have; see the module docstring for what and how.

    Args:
        model: the module being trained (parameter count, memory owners; FLOPs need nothing from it).
        optimizer: its optimizer (memory owners: gradients and optimizer state).
        device: "cuda", "cuda:1", "cpu", or "auto" (the model's device, else CUDA when available).
        samples_per_step: samples per optimizer step; default: inferred from the batches `wrap()` yields.
        tokens_per_sample: to report tokens/s.
        name: the workload's name in results.json and the report.
        precision: what the loop runs ("fp32", "bf16", "fp16"), recorded for the rules; None = not stated.
        warmup_steps: optimizer steps not timed (>= 1: the first step pays one-time costs).
        count_flops: count model FLOPs on one step (skipped for a torch.compile'd module: the counter
            cannot see into compiled graphs — pass flops_per_step instead).
        flops_per_step: model FLOPs per optimizer step, when you know them (e.g. 6·N·tokens); no counting.
        sample_utilization: sample NVML (GPU) and host CPU load in a background thread at
            `utilization_interval_s`, for at most `utilization_max_s` seconds after warm-up.
        capture_steps: (start, stop) optimizer-step indices (0-based, stop excluded) to record with
            torch.profiler via perfscope.trace, labelled ProfilerStep#start … #stop-1 in the trace; those
            steps are not timed, nor the one before them (the profiler's warm-up step).
        trace_dir: the folder the trace (rank<R>.json.gz) is written to during the run (default: a temporary
            folder); save() copies it into <out>/trace/. A folder of traces only: HTA loads every file in it.
        peak_tflops: the MFU denominator, overriding the datasheet / measured ceiling.
        measure_ceiling: at results()/save() time, measure this machine's matmul ceiling (about a second,
            after the memory peaks are read, on the profiler's device, with its own RNG state).
        max_step_samples: per-step samples kept (a uniform reservoir) for the typical-step description.
        flush_every: read finished CUDA events every this many steps (bounds the pending events).
        gather_timeout_s: in a torchrun job, how long rank 0's save() waits for the other ranks' summaries
            (every rank must call save(); a rank that has not reported by then is named in the results).
        enabled: False (or PERFSCOPE_DISABLE=1 in the environment) makes every call a near-free no-op.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        device: str | torch.device | None = "auto",
        samples_per_step: int | None = None,
        tokens_per_sample: int | None = None,
        name: str = "hooks",
        precision: str | None = None,
        warmup_steps: int = 5,
        count_flops: bool = True,
        flops_per_step: float | None = None,
        sample_utilization: bool = True,
        utilization_interval_s: float = 0.1,
        utilization_max_s: float = 600.0,
        capture_steps: tuple[int, int] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        peak_tflops: float | None = None,
        measure_ceiling: bool = True,
        max_step_samples: int = 2048,
        flush_every: int = 50,
        gather_timeout_s: float = 300.0,
        enabled: bool = True,
    ) -> None:
        self.enabled = bool(enabled) and not disabled_by_env()
        self._on = self.enabled  # the hot-path flag: False once disabled, failed or closed
        self._failed: str | None = None
        if not self.enabled:
            return
        for arg, value, low in (
            ("warmup_steps", warmup_steps, 1), ("max_step_samples", max_step_samples, 1), ("flush_every", flush_every, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Profiler({arg}=...) must be an int >= {low}, got {value!r}")
        for arg, value in (("samples_per_step", samples_per_step), ("tokens_per_sample", tokens_per_sample)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"Profiler({arg}=...) must be a positive int or None, got {value!r}")
        self._check_precision(precision)
        if isinstance(gather_timeout_s, bool) or not isinstance(gather_timeout_s, int | float) or not gather_timeout_s > 0:
            raise ValueError(f"Profiler(gather_timeout_s=...) must be a number > 0, got {gather_timeout_s!r}")
        if capture_steps is not None:
            start, stop = capture_steps
            if not (isinstance(start, int) and isinstance(stop, int) and 1 <= start < stop):
                raise ValueError(f"Profiler(capture_steps=(start, stop)) needs 1 <= start < stop, got {capture_steps!r}")

        from perfscope.measure.clock import clock_for

        self.model, self.optimizer = model, optimizer
        self.device = _resolve_device(device, model)
        self.samples_per_step, self.tokens_per_sample = samples_per_step, tokens_per_sample
        self.name, self.precision = name, precision
        self.warmup_steps, self.flush_every = warmup_steps, flush_every
        self.count_flops, self.user_flops_per_step = count_flops, flops_per_step
        self.sample_utilization = sample_utilization
        self.utilization_interval_s, self.utilization_max_s = utilization_interval_s, utilization_max_s
        self.capture_steps = capture_steps
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.peak_tflops, self.measure_ceiling = peak_tflops, measure_ceiling
        self.gather_timeout_s = float(gather_timeout_s)
        # A torchrun job: found here, or at the first step when the loop creates its process group later.
        self._place: RankPlace | None = _find_place()
        self._instance, self._saves = next(_INSTANCES), 0

        self._clock = clock_for(self.device)
        self._started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._t0 = time.perf_counter()
        self._step_index = 0  # the optimizer step in progress (0-based) = steps completed so far
        # The step in progress.
        self._yields = 0
        self._explicit_micro = 0
        self._yield_samples = 0
        self._explicit_samples = 0
        self._samples_unknown = False
        # Windows of timed steps.
        self._recorder: WindowRecorder | None = None
        self._windows: list[Window] = []
        self._reservoir = _Reservoir(max_step_samples)
        self._samples_per_step: Counter[int] = Counter()
        self._micro_per_step: Counter[int] = Counter()
        self._micro_batch: Counter[int] = Counter()
        self._excluded: Counter[str] = Counter()
        self._excluded_s: Counter[str] = Counter()
        self._pause_reason: str | None = None
        self._pause_t0 = 0.0
        self._since_t = self._t0  # host time of the last step boundary or resume: exclude_since_step() counts from it
        self._batch_begun = False  # batch_begin() was called in the step in progress
        self._batch_hooks = False  # a framework marks batch starts: an armed FLOP count starts at the next one
        self._data_hooked = False  # a framework reports its fetches through data_begin()/data_end()
        self._data_recorder: WindowRecorder | None = None  # the window a data_begin() opened a wait in
        self._data_span: Any = None  # the perfscope::data span a data_begin() opened in the trace
        self._since_flush = 0
        self._first_marks: list[Any] = []  # [start of step 0, end of step 0], when wrap() saw step 0 begin
        self._wrap_used = False
        self._live_wraps = 0
        self._loader_config: dict[str, Any] = {}
        # FLOP counting.
        self._flop_index = self._first_step_outside_capture(warmup_steps)
        self._flop_armed = False
        self._flop_counter: Any = None
        self._flops: tuple[float, int | None, list[str]] | None = None  # (count, samples in that step, notes)
        self._hardware_per_model = 1.0  # hardware / model FLOPs of the counted step
        self._flop_unavailable: str | None = None
        self._flop_restarts: list[str] = []  # why a FLOP count was discarded (a pause inside the counted step)
        self._fingerprint: Any = None  # the structural fingerprint, counted at the FLOP-counting step
        # What the loop really runs (perfscope.hooks.observe): watched during the FLOP-counting step.
        self._observer: observe.StepObserver | None = None
        self._precision_seen: observe.Observation | None = None
        self._graphs_at_start = observe.graphs_compiled()
        if flops_per_step is None and count_flops and model is not None and hasattr(model, "_orig_mod"):
            self._flop_unavailable = observe.compiled_flops_unavailable("the model is torch.compile'd")
        # Utilization, trace capture.
        self._sampler: Any = None
        self._sampler_started = 0.0
        self._utilization: Any = None  # frozen result once the sampler stopped
        self._capture: Any = None
        self._capture_end = -1
        self._trace_path: Path | None = None
        self._trace_notes: list[str] = []
        self._active_steps: Any = None
        self._environment: Environment | None = None
        self._results_notes: list[str] = []
        self._described_config: dict[str, Any] = {}
        self._declared: dict[str, Any] = {}

    # ----------------------------------------------------------------------------- public, hot path

    def wrap(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``loader`` through the profiler: batches pass unchanged, time blocked in next() is measured."""
        if not self._on:
            return iter(loader)
        try:
            self._note_loader(loader)
        except Exception as exc:  # noqa: BLE001 - never the host loop's problem
            self._fail("wrap()", exc)
            return iter(loader)
        return self._wrapped(loader)

    def step(self, samples: int | None = None) -> None:
        """Mark the end of one optimizer step (``samples``: this step's sample count, when you know it)."""
        if not self._on:
            return
        try:
            self._end_step(samples)
        except Exception as exc:  # noqa: BLE001
            self._fail("step()", exc)

    def micro_step(self, samples: int | None = None) -> None:
        """Mark one micro-batch of gradient accumulation, for loops that do not iterate through `wrap()`."""
        if not self._on:
            return
        self._explicit_micro += 1
        if samples is not None:
            try:
                self._explicit_samples += int(samples)
            except Exception as exc:  # noqa: BLE001
                self._fail("micro_step()", exc)

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
            if self._flop_armed:
                self._flop_armed = False
                self._start_flop_count()
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
        """The time since the last step boundary (or the last resume) was not training: for frameworks that
        report evaluation or checkpoint saving only once it is done (the Trainer's on_evaluate, on_save).

        `pause()` then `resume()`: the time is reported apart under ``reason``, and the step in progress is
        timed from now (or not at all when its compute had already begun).
        """
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

        from perfscope.results import TrialConfig

        known = {f.name for f in fields(TrialConfig)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Profiler.describe(): not TrialConfig fields: {', '.join(unknown)}")
        if "precision" in config:
            self._check_precision(config["precision"])
            self.precision = config["precision"]
        self._described_config.update({k: v for k, v in config.items() if v is not None and k != "precision"})
        self._declared.update(declared or {})
        if config.get("compile") and self._wants_flop_count():
            self._flop_unavailable = observe.compiled_flops_unavailable("the model runs under torch.compile")

    def describe_loader(self, loader: Any) -> None:
        """Record a DataLoader's settings (workers, pinned memory, ...) as the loop's: `wrap()` does it itself;
        a framework adapter passes the loader its trainer iterates."""
        if self.enabled and isinstance(loader, torch.utils.data.DataLoader):
            self._loader_config = {
                "num_workers": loader.num_workers,
                "pin_memory": loader.pin_memory,
                "prefetch_factor": loader.prefetch_factor,
                "persistent_workers": loader.persistent_workers,
            }

    @contextmanager
    def step_context(self, samples: int | None = None) -> Iterator[None]:
        """``with prof.step_context(): ...`` = the body, then `step()` (not when the body raises)."""
        yield
        self.step(samples)

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
            now = time.perf_counter()
            self._excluded_s[self._pause_reason] += now - self._pause_t0
            self._excluded[self._pause_reason] += 1
            self._pause_reason, self._pause_t0 = reason, now
            return
        try:
            self._close_window()
            if self._flop_counter is not None:
                self._discard_flop_count(reason)
            self._pause_reason = reason
            self._pause_t0 = time.perf_counter() if self._step_begun() else self._since_t
        except Exception as exc:  # noqa: BLE001
            self._fail("pause()", exc)

    def resume(self) -> None:
        """Timing restarts with the step in progress (its start is this call), or with the next one when the
        step in progress had already begun its compute before the pause (a step timed in part is no step)."""
        if not self._on or self._pause_reason is None:
            return
        try:
            now = time.perf_counter()
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

    # ------------------------------------------------------------------------------ public, end of run

    def close(self) -> None:
        """Stop measuring: read the pending events, stop the sampler, end an open capture. Idempotent."""
        if not self._on:
            return
        try:
            self.resume()
            self._close_window()
        except Exception as exc:  # noqa: BLE001
            self._fail("close()", exc)
        self._on = False
        self._teardown()

    def results(self) -> Results | None:
        """The measurements as a Results (source "hooks"), or None when disabled or after an internal error.

        May be called mid-run (it waits for the pending step events once).
        """
        return self._results()

    def _results(self, *, ratios: bool = True) -> Results | None:
        if not self.enabled or self._failed is not None:
            return None
        try:
            return self._build_results(ratios=ratios)
        except Exception as exc:  # noqa: BLE001
            self._fail("results()", exc)
            return None

    def save(self, out_dir: str | os.PathLike[str], *, final: bool = True) -> Path | None:
        """Write ``out_dir/results.json`` (atomically), the findings and ``report.html``.

        ``final=False`` keeps measuring (a snapshot); by default the profiler closes first. Returns the
        results.json path, or None when disabled or on failure (which is warned about, never raised).

        In a torchrun job **every rank calls save()** (with the same ``out_dir``): each sends rank 0 its own
        summary and returns None at once; rank 0 waits for them (at most `gather_timeout_s`) and writes the one
        results.json of the job (docs/hooks.md, "Distributed (torchrun)").
        """
        if not self.enabled:
            return None
        if final or not self._on or self._pause_reason is not None:
            return self._save(Path(out_dir), final)
        with self.paused("snapshot save()"):  # writing the snapshot is not a training step's time
            return self._save(Path(out_dir), final)

    def _save(self, out_dir: Path, final: bool) -> Path | None:
        if self._place is not None:
            return self._save_job(self._place, out_dir, final)
        return self._save_alone(out_dir, final)

    def _save_alone(self, out_dir: Path, final: bool, results: Results | None = None) -> Path | None:
        if self._failed is not None:
            return None
        if final:
            self.close()
        results = results if results is not None else self.results()
        if results is None:
            return None
        from perfscope.pipeline import finish

        try:
            return finish(results, out_dir, trace_source=self._trace_path)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"perfscope: could not save results to {out_dir}: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=3)
            return None

    def _save_job(self, place: RankPlace, out_dir: Path, final: bool) -> Path | None:
        """Every rank: its summary to rank 0 (even a failed profiler's, saying why); rank 0: the job's results."""
        from perfscope.hooks.distributed import RankReport, exchange, own_cpu_cores, rank_metrics

        if _find_place() is None:
            alone = out_dir / f"rank{place.rank}"
            warnings.warn(f"perfscope: the process group was gone at save(): rank {place.rank} saves its own results to "
                          f"{alone} (call prof.save() before destroy_process_group())", RuntimeWarning, stacklevel=3)
            return self._save_alone(alone, final)
        self._saves += 1
        if final and self._failed is None:
            self.close()
        results = self._results(ratios=False) if self._failed is None else None
        metrics = results.trials[0].metrics if results is not None else None
        try:
            why = results.trials[0].error if results is not None else None
            report = RankReport(rank=place.rank, error=self._failed, own_cpu_cores=own_cpu_cores(metrics),
                                trace=str(self._trace_path) if self._trace_path is not None else None,
                                metrics=rank_metrics(place, metrics, self.model, self.optimizer, why or self._failed or ""))
            reports = exchange(place, report, key=f"perfscope/hooks/{self._instance}/{self._saves}",
                               timeout_s=self.gather_timeout_s, device=self.device)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"perfscope: rank {place.rank} could not exchange its summary at save(): {type(exc).__name__}: "
                          f"{exc}" + (" (rank 0 saves its own results alone)" if place.rank == 0 else ""),
                          RuntimeWarning, stacklevel=3)
            reports = None
        if place.rank != 0 or results is None:
            return None
        if reports is not None and metrics is not None:
            try:
                self._make_job(place, results, reports, out_dir)
            except Exception as exc:  # noqa: BLE001
                warnings.warn(f"perfscope: the job's figures could not be combined: {type(exc).__name__}: {exc}; "
                              "results.json holds rank 0's own", RuntimeWarning, stacklevel=3)
        if metrics is not None and metrics.distributed is None:
            from perfscope.measure.mfu import apply_utilization_ratios

            apply_utilization_ratios(metrics, results.peak, results.environment)
        return self._save_alone(out_dir, final=False, results=results)

    def _make_job(self, place: RankPlace, results: Results, reports: list[RankReport | None], out_dir: Path) -> None:
        """Rank 0: every rank's metrics into ``metrics.distributed``, the trial's figures the job's, traces copied."""
        from perfscope.hooks.distributed import layout, without_peers
        from perfscope.measure.job import apply_job, combine_ranks
        from perfscope.results.distributed import RankMetrics

        received = [r for r in reports if r is not None]
        missing = [rank for rank, r in enumerate(reports) if r is None]
        without_peers(received)
        ranks = []
        for report in received:
            rank = report.metrics or RankMetrics(rank=report.rank)
            if report.error:
                rank.unavailable["steps"] = f"its profiler disabled itself after an internal error: {report.error}"
            ranks.append(rank)
        trial = results.trials[0]
        nnodes, nproc = layout(place, received)
        trial.config = trial.config.replace(nnodes=nnodes, nproc_per_node=nproc)
        facts = combine_ranks(ranks, backend=place.backend, data_parallel=trial.config.data_parallel, nnodes=nnodes,
                              nproc_per_node=nproc, global_batch=trial.config.global_batch)
        facts.world_size = place.world_size
        if missing:
            why = (f"rank(s) {', '.join(map(str, missing))} did not report within {self.gather_timeout_s:g} s of rank 0's "
                   "save() (every rank must call prof.save())")
            facts.job_samples_per_s = None
            facts.unavailable["job_samples_per_s"] = why
            results.notes.append(f"job figures unavailable: {why}")
        elif facts.job_samples_per_s is None:
            facts.unavailable["job_samples_per_s"] = "a rank has no timed window, or its sample count is unknown"
        assert trial.metrics is not None
        apply_job(trial.metrics, facts, peak=results.peak, env=results.environment)
        results.notes.append(
            f"a torchrun job of {place.world_size} ranks ({place.backend}): samples/s and MFU are the job's (every rank's "
            "work over the slowest rank's window; MFU per device); step times, data wait and memory are rank 0's, "
            "every rank's are in the per-rank view")
        for report in received:
            if report.rank == 0 or report.trace is None:
                continue
            source = Path(report.trace)
            if source.is_file():  # the same node, or a trace_dir on a shared filesystem
                from perfscope.results.io import copy_file

                (out_dir / "trace").mkdir(parents=True, exist_ok=True)
                copy_file(source, out_dir / "trace" / source.name)
            else:
                results.notes.append(f"rank {report.rank}'s trace stays on its node ({report.trace})")

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def samples_per_step_given(self) -> bool:
        """True when samples_per_step was passed (then batches are not inspected)."""
        return self.enabled and self.samples_per_step is not None

    @property
    def rank_place(self) -> RankPlace | None:
        """This rank's place in a torchrun job (rank, world size, node, backend); None in a single process."""
        return self._place if self.enabled else None

    @property
    def steps_completed(self) -> int:
        """Optimizer steps seen so far (0 when disabled)."""
        return self._step_index if self.enabled else 0

    # ------------------------------------------------------------------------------------- internals

    def _capture_window(self) -> tuple[int, int]:
        """(first, stop): the profiler runs from `first` — one warm-up step before capture_steps where there is
        one, so the recorded steps do not pay the profiler's start-up — and records exactly capture_steps."""
        assert self.capture_steps is not None
        start, stop = self.capture_steps
        return (start - 1 if start >= 2 else start), stop

    @staticmethod
    def _check_precision(precision: str | None) -> None:
        if precision is not None and precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"Profiler(precision=...) must be 'fp32', 'bf16', 'fp16' or None, got {precision!r}")

    def _step_begun(self) -> bool:
        """The step in progress has started its compute: timing it from now would count part of it."""
        return bool(self._yields or self._explicit_micro or self._batch_begun)

    def _first_step_outside_capture(self, index: int) -> int:
        if self.capture_steps is not None:
            first, stop = self._capture_window()
            if first <= index < stop:
                return stop
        return index

    def _excluded_step(self, index: int) -> bool:
        in_capture = self.capture_steps is not None and (
            self._capture_window()[0] <= index < max(self._capture_end, self.capture_steps[1]))
        return in_capture or (index == self._flop_index and self._wants_flop_count())

    def _note_loader(self, loader: Iterable[Any]) -> None:
        self._wrap_used = True
        self.describe_loader(loader)

    def _wrapped(self, loader: Iterable[Any]) -> Iterator[Any]:
        it = iter(loader)
        self._live_wraps += 1
        try:
            while True:
                recorder = self._recorder if self._on else None
                if self._on and self._step_index == 0 and not self._first_marks and self._yields == 0:
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
                        self._on_batch(batch)
                    except Exception as exc:  # noqa: BLE001
                        self._fail("wrap()", exc)
                yield batch
        finally:
            self._live_wraps -= 1

    def _on_batch(self, batch: Any) -> None:
        self._yields += 1
        if self.samples_per_step is None:
            n = leading_dim(batch)
            if n is None:
                self._samples_unknown = True
            else:
                self._yield_samples += n
                self._micro_batch[n] += 1
        if self._flop_armed:
            self._flop_armed = False
            self._start_flop_count()  # after next() returned: the data loading is not under the dispatch mode

    def _step_samples(self, samples: int | None) -> int | None:
        if samples is not None:
            return int(samples)
        if self.samples_per_step is not None:
            return self.samples_per_step
        if self._explicit_samples:
            return self._explicit_samples
        if self._yield_samples and not self._samples_unknown:
            return self._yield_samples
        return None

    def _end_step(self, samples: int | None) -> None:
        k = self._step_index
        if k == 0 and self._place is None:
            self._place = _find_place()
        # Costly end-of-step work first, so it lands in this (untimed) step, not in the next one.
        flop_step = self._flop_counter is not None
        if flop_step:
            self._stop_flop_count()
        if self._capture is not None:
            self._excluded["profiler capture"] += 1
            self._capture.step()
            if k + 1 >= self._capture_end:
                self._stop_capture()
        micro = self._explicit_micro or self._yields or 1
        samples = self._step_samples(samples)
        if flop_step:
            self._excluded["FLOP counting"] += 1
            if self._flops is not None:
                self._flops = (self._flops[0], samples, self._flops[2])
        if k == 0 and len(self._first_marks) == 1:
            self._first_marks.append(self._clock.mark())
        if self._recorder is not None:
            self._recorder.step_end(samples=samples, micro_steps=micro)
            if samples is not None:
                self._samples_per_step[samples] += 1
            self._micro_per_step[micro] += 1
        self._yields, self._explicit_micro, self._yield_samples, self._explicit_samples = 0, 0, 0, 0
        self._samples_unknown = False
        self._batch_begun = False
        self._since_t = time.perf_counter()
        self._step_index = k = k + 1
        # The boundary just marked starts step k: open, keep or close the window for it.
        if k == self.warmup_steps:
            self._start_sampler()  # before the window's first mark: thread start-up is not timed
        timed = k >= self.warmup_steps and not self._excluded_step(k) and self._pause_reason is None
        if timed and self._recorder is None:
            self._open_window()
        elif not timed and self._recorder is not None:
            self._close_window()
        # Start-of-step work for step k (after the boundary: it belongs to that untimed step).
        if self.capture_steps is not None and k == self._capture_window()[0]:
            self._start_capture()
        if k == self._flop_index and self._wants_flop_count():
            if self._live_wraps or self._batch_hooks:
                self._flop_armed = True  # entered when wrap() yields the next batch, or at the next batch_begin()
            else:
                self._start_flop_count()
        self._since_flush += 1
        if self._since_flush >= self.flush_every:
            self._since_flush = 0
            if self._recorder is not None:
                self._recorder.poll()
            self._check_sampler()

    def _open_window(self) -> None:
        from perfscope.measure.window import WindowRecorder

        handle = getattr(self._sampler, "nvml_handle", None)
        self._recorder = WindowRecorder(self._clock, on_step=self._reservoir.add, nvml_handle=handle,
                                        flush_every=self.flush_every, first_index=self._step_index)
        self._recorder.start()

    def _close_window(self) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is not None and recorder.started:
            window = recorder.finish()
            if window.steps:
                self._windows.append(window)

    # --- FLOPs

    def _wants_flop_count(self) -> bool:
        return self.count_flops and self.user_flops_per_step is None and self._flop_unavailable is None and self._flops is None

    def _start_flop_count(self) -> None:
        # The structure counter holds the FLOP counter: one dispatch-mode step gives FLOPs and the fingerprint.
        from perfscope.measure.structure import StructureCounter

        observer = observe.StepObserver(self.model, self.device.type)
        observer.__enter__()  # before the dispatch mode: compiled code runs eagerly under it
        self._observer = observer
        counter = StructureCounter(self.device.type)
        try:
            counter.__enter__()
        except BaseException:
            self._stop_observer()  # the compiler's stance and the forward hook are the user's again
            raise
        self._flop_counter = counter

    def _compile_seen(self) -> observe.Observation:
        return observe.compile_state(self.model, self._graphs_at_start)

    def _stop_observer(self) -> observe.StepObserver | None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.__exit__(None, None, None)
        return observer

    def _discard_flop_count(self, reason: str) -> None:
        """A pause inside the counted step: its count would include the paused work (evaluation is a forward
        pass over other data), so it is dropped and the next step is counted instead."""
        counter, self._flop_counter = self._flop_counter, None
        counter.__exit__(None, None, None)
        self._stop_observer()
        self._flop_restarts.append(f"step {self._step_index} ({reason} inside it)")
        if len(self._flop_restarts) >= _MAX_FLOP_RESTARTS:
            self._flop_unavailable = (f"{reason} ran inside each of the {len(self._flop_restarts)} steps the FLOP "
                                      "count was tried on (pass Profiler(flops_per_step=...))")
        else:
            self._flop_index = self._step_index + 1

    def _stop_flop_count(self) -> None:
        counter, self._flop_counter = self._flop_counter, None
        counter.__exit__(None, None, None)
        observer = self._stop_observer()
        notes = list(counter.flop_counter.notes)
        method = f"the FLOP-counting step (step {self._step_index}) of your loop, counted under a dispatch mode"
        if observer is not None:
            self._precision_seen = observer.precision(dict(counter.flops_by_dtype))
            if observer.forced_eager and observe.graphs_compiled():
                notes.append(observe.EAGER_COUNT_NOTE)
                method += "; " + observe.EAGER_COUNT_NOTE
        flops = counter.flop_counter
        self._hardware_per_model = flops.total / flops.model_total if flops.model_total else 1.0
        self._flops = (flops.model_total, None, notes)
        self._fingerprint = counter.fingerprint(method=method)

    # --- utilization

    def _start_sampler(self) -> None:
        if not self.sample_utilization:
            return
        from perfscope.measure.utilization import UtilizationSampler

        self._sampler = UtilizationSampler(
            device=self.device.type, device_index=self.device.index, interval_s=self.utilization_interval_s
        )
        self._sampler.__enter__()
        self._sampler_started = time.perf_counter()

    def _check_sampler(self) -> None:
        """Bound the sampler's memory on long runs: stop after utilization_max_s and keep its result."""
        if self._sampler is not None and time.perf_counter() - self._sampler_started > self.utilization_max_s:
            self._stop_sampler()

    def _stop_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.__exit__(None, None, None)
            self._utilization = sampler.result()

    # --- trace capture

    def _start_capture(self) -> None:
        assert self.capture_steps is not None
        if torch.autograd._profiler_enabled():
            self._trace_notes.append("a torch.profiler was already running on this thread: it was left alone, no capture")
            warnings.warn(
                "perfscope: a torch.profiler is already running; capture_steps skipped (your profiler is left alone)",
                RuntimeWarning, stacklevel=4,
            )
            return
        from perfscope.trace.capture import TraceCapture

        trace_dir = self.trace_dir or Path(tempfile.mkdtemp(prefix="perfscope-trace-"))
        trace_dir.mkdir(parents=True, exist_ok=True)
        (first, stop), start = self._capture_window(), self.capture_steps[0]
        # trace_dir/rank<R>.json.gz, its ProfilerStep#N labelled by the optimizer step (capture_steps' numbering).
        capture = TraceCapture(trace_dir, device=self.device.type, first_step=first, wait=0, warmup=start - first,
                               active=stop - start)
        capture.__enter__()
        self._capture = capture
        needed = getattr(capture, "total_steps", None) or stop - first
        self._capture_end = first + max(stop - first, needed)
        if self._flops is None and self._flop_index < self._capture_end:
            self._flop_index = self._capture_end  # count FLOPs outside the profiled window

    def _stop_capture(self) -> None:
        capture, self._capture = self._capture, None
        capture.__exit__(None, None, None)
        self._trace_path = capture.path
        self._active_steps = getattr(capture, "active_steps", None)
        if capture.path is None:
            self._trace_notes.append(getattr(capture, "note", None) or "trace unavailable")

    # --- failure and teardown

    def _fail(self, where: str, exc: BaseException) -> None:
        """An internal error: warn once, stop measuring, release what we hold. Never raises."""
        self._on = False
        if self._failed is None:
            self._failed = f"{where}: {type(exc).__name__}: {exc}"
            warnings.warn(
                f"perfscope: the profiler disabled itself after an internal error in {self._failed} "
                "(your training is unaffected; no results will be saved)",
                RuntimeWarning, stacklevel=3,
            )
        self._teardown()

    def _teardown(self) -> None:
        """Leave no dispatch mode, profiler or thread behind (each step on its own: one failure is not all)."""
        self._flop_armed = False
        try:
            self._end_data_span()
        except Exception:  # noqa: BLE001
            self._data_span = None
        if self._flop_counter is not None:
            counter, self._flop_counter = self._flop_counter, None
            try:
                counter.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
            self._flop_unavailable = self._flop_unavailable or "the run ended during the FLOP-counting step"
        try:
            self._stop_observer()  # whether or not the counter started: the stance must not outlive the Profiler
        except Exception:  # noqa: BLE001
            pass
        if self._capture is not None:
            try:
                self._stop_capture()
            except Exception as exc:  # noqa: BLE001
                self._capture = None
                self._trace_notes.append(f"trace capture failed: {type(exc).__name__}: {exc}")
        try:
            self._stop_sampler()
        except Exception:  # noqa: BLE001
            self._sampler = None

    # --- results

    def _environment_once(self) -> Environment:
        """Read after the memory peaks (the ceiling probe allocates), on the profiler's own device."""
        if self._environment is None:
            from perfscope.measure.environment import collect_environment

            devices = [self._cuda_index()] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), (torch.cuda.device(self.device) if devices else _nothing()):
                self._environment = collect_environment(  # only rank 0's environment is written
                    self.device.type, device_index=devices[0] if devices else 0,
                    measure_ceiling=self.measure_ceiling and (self._place is None or self._place.rank == 0),
                )
        return self._environment

    def _cuda_index(self) -> int:
        """The GPU this rank trains on: the device's own index, else (plain "cuda") the process's current device,
        which a torchrun rank sets from its LOCAL_RANK; never a blanket 0."""
        from perfscope.measure.nvml import current_cuda_index

        return self.device.index if self.device.index is not None else current_cuda_index()

    def _build_results(self, *, ratios: bool = True) -> Results:
        from perfscope import __version__
        from perfscope.measure import memory
        from perfscope.measure.flops import FLOP_CONVENTION
        from perfscope.measure.metrics import assemble_metrics
        from perfscope.measure.mfu import apply_utilization_ratios, choose_peak
        from perfscope.results import Results, Trial

        windows = list(self._windows)
        if self._recorder is not None and self._recorder.started:
            snapshot = self._recorder.finish()  # waits for the pending events once; the window stays open
            if snapshot.steps:
                windows.append(snapshot)
        memory_peaks = self._memory_peaks()  # before the environment probe: its matmuls allocate
        env = self._environment_once()
        peak = choose_peak(env, self.peak_tflops)
        notes = list(self._results_notes)
        elapsed = time.perf_counter() - self._t0
        workload = self._workload_info()
        timed = sum(w.steps for w in windows)
        micro_batch = _most_common(self._micro_batch)
        typical_micro = _most_common(self._micro_per_step) or 1
        typical_samples = _most_common(self._samples_per_step)
        config, unknown = self._trial_config(micro_batch or (typical_samples // typical_micro if typical_samples else 1), typical_micro)
        common = dict(name="baseline", configuration="baseline", sequence=1, config=config, unknown_settings=unknown,
                      wall_time_s=elapsed, started_at=self._started_at)
        if timed == 0:
            why = (
                f"no timed step: {self._step_index} optimizer step(s) seen, {self.warmup_steps} of them warm-up"
                + (f", {sum(self._excluded.values())} excluded ({', '.join(self._excluded)})" if self._excluded else "")
            )
            trial = Trial(status="skipped", error=why, **common)  # type: ignore[arg-type]
            return Results(perfscope_version=__version__, created_at=_now(), source="hooks", command=_command(),
                           environment=env, workload=workload, peak=peak, trials=[trial], notes=notes + [why])
        records = self._reservoir.in_order()
        metrics = assemble_metrics(
            windows, records, micro_batch_size=config.micro_batch_size, grad_accum_steps=typical_micro,
            warmup_steps=self.warmup_steps, samples_per_step=typical_samples or 0,
            tokens_per_sample=self.tokens_per_sample, step_times_sampled=self._reservoir.seen > len(records),
        )
        metrics.flop_convention = FLOP_CONVENTION
        metrics.host_rss_peak_bytes = memory.process_peak_rss_bytes()
        metrics.utilization = self._utilization_result()
        if len(self._samples_per_step) > 1:
            notes.append(f"samples per step varied ({min(self._samples_per_step)}..{max(self._samples_per_step)}): "
                         "samples/s counts every step's own samples")
        metrics.unavailable["losses"] = "hooks never read the loss (reading it is a device sync)"
        if metrics.step_times_sampled:
            notes.append(f"{timed} steps timed; the per-step times kept are a uniform sample of {len(records)} of them "
                         "(throughput and data wait cover every timed step)")
        if self._excluded:
            spent = {why: s for why, s in self._excluded_s.items() if s}
            metrics.excluded_s = {why: round(s, 6) for why, s in spent.items()}
            notes.append("not timed: " + ", ".join(
                f"{why} ({n} ×" + (f", {spent[why]:.2f} s, {spent[why] / elapsed:.0%} of wall time)" if why in spent else ")")
                for why, n in self._excluded.items()))
        if not self._wrap_used and not self._data_hooked:
            metrics.unavailable["data_wait_share"] = "not measured: iterate with prof.wrap(loader) to measure the time blocked on data"
        self._fill_first_step(metrics)
        self._fill_flops(metrics, typical_samples)
        self._fill_memory(metrics, memory, memory_peaks)
        self._fill_fingerprint(metrics)
        self._fill_trace(metrics)
        if ratios:  # a job's are applied once every rank reported (perfscope.measure.job.apply_job)
            apply_utilization_ratios(metrics, peak, env)
        trial = Trial(status="ok", metrics=metrics, **common)  # type: ignore[arg-type]
        return Results(perfscope_version=__version__, created_at=_now(), source="hooks", command=_command(),
                       environment=env, workload=workload, peak=peak, trials=[trial], notes=notes)

    def _workload_info(self) -> WorkloadInfo:
        from perfscope.results import WorkloadInfo
        from perfscope.workload import file_sha256

        script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
        path, sha = "<interactive>", ""
        if script is not None and script.is_file():
            path, sha = str(script.resolve()), file_sha256(script)
        params = sum(p.numel() for p in self.model.parameters()) if self.model is not None else None
        declared: dict[str, Any] = {"source": "hooks"}
        if self.tokens_per_sample is not None:
            declared["tokens_per_sample"] = self.tokens_per_sample
        if self.precision is not None:
            declared["precision"] = self.precision
        if self.samples_per_step is not None:
            declared["samples_per_step"] = self.samples_per_step
        declared.update(self._loader_config)
        declared.update(observe.observed_words(self._precision_seen, self._compile_seen()))
        declared.update(self._declared)
        declared = {k: v for k, v in declared.items() if v is not None}  # absent is absent, never "None" in the report
        return WorkloadInfo(path=path, sha256=sha, name=self.name, declared=declared, parameter_count=params)

    def _trial_config(self, micro_batch: int, accum: int) -> tuple[Any, list[str]]:
        """What is known about the user's loop as a TrialConfig, and the fields that were not observed."""
        from perfscope.measure.tf32 import matmul_tf32_enabled
        from perfscope.results import TrialConfig
        from perfscope.search.knobs import unobserved_fields

        unknown = []
        known: dict[str, Any] = {"device": self.device.type, "warmup_steps": self.warmup_steps,
                                 "micro_batch_size": max(1, micro_batch), "grad_accum_steps": max(1, accum),
                                 "tf32": matmul_tf32_enabled()}  # never raises, whichever TF32 API the loop used
        settings = observe.observed_settings(self.precision, self._precision_seen, self._compile_seen())
        known.update(settings.known)
        unknown += settings.unknown
        if self._loader_config:
            known.update({k: v for k, v in self._loader_config.items() if v is not None and k != "prefetch_factor"})
            if self._loader_config.get("num_workers"):
                known["prefetch_factor"] = self._loader_config.get("prefetch_factor")
        else:
            unknown += ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"]
        unknown += unobserved_fields()  # the knobs a loop's observations cannot see (Knob.observed_by_hooks)
        if self._place is not None:
            from perfscope.hooks.distributed import data_parallel_of, ddp_settings, layout

            known["nnodes"], known["nproc_per_node"] = layout(self._place, [])
            known["data_parallel"] = data_parallel_of(self.model, self.optimizer)
            known.update(ddp_settings(self.model))
            unknown += {"ddp": ["no_sync", "comm_hook"], "zero1": ["no_sync", "comm_hook"],
                        "fsdp": ["no_sync", "reshard_after_forward", "fsdp_mixed_precision"]}.get(known["data_parallel"], [])
        known.update(self._described_config)  # what a framework adapter read from its trainer
        unknown = [name for name in unknown if name not in self._described_config]
        return TrialConfig(**known), unknown

    def _utilization_result(self) -> Any:
        if self._sampler is not None:
            return self._sampler.result()  # a snapshot while the sampler keeps running
        return self._utilization

    def _fill_first_step(self, metrics: Any) -> None:
        if len(self._first_marks) == 2:
            start, end = self._first_marks
            self._clock.wait(end)
            metrics.first_step_s = self._clock.elapsed_s(start, end)
            if self.model is not None and hasattr(self.model, "_orig_mod"):
                metrics.compile_time_s = max(metrics.first_step_s - metrics.mean_step_time_s, 0.0)
        else:
            metrics.unavailable["first_step_s"] = "measured only when the first step's batch comes through prof.wrap()"

    def _fill_flops(self, metrics: Any, samples_per_step: int | None) -> None:
        if self.user_flops_per_step is not None:
            metrics.flops_per_step = float(self.user_flops_per_step)
            metrics.flop_convention = "user supplied (Profiler(flops_per_step=...))"
        elif self._flops is not None:
            total, counted_samples, flop_notes = self._flops
            metrics.flop_notes = list(flop_notes)
            if counted_samples and samples_per_step and counted_samples != samples_per_step:
                total = total * samples_per_step / counted_samples
                metrics.flop_notes.append(f"the counted step had {counted_samples} samples: scaled to {samples_per_step} per step")
            metrics.hardware_flops_per_step = total * self._hardware_per_model  # attention's recompute kept in HFU
            metrics.flops_per_step = total
            if self._flop_restarts:
                metrics.flop_notes.append("counted again on a later step, the count of " + ", ".join(self._flop_restarts)
                                          + " being discarded: it was not a training step alone")
            metrics.flop_notes.append(
                "counted on one optimizer step of the loop as it ran: with activation checkpointing the recomputed "
                "forward is included, and this MFU is then a hardware-FLOP figure (pass Profiler(flops_per_step=...))"
            )
        elif self._flop_unavailable is not None:
            metrics.unavailable["flops_per_step"] = self._flop_unavailable
        elif not self.count_flops:
            metrics.unavailable["flops_per_step"] = "FLOP counting disabled (Profiler(count_flops=False))"
        else:
            metrics.unavailable["flops_per_step"] = f"the FLOP-counting step (step {self._flop_index}) was not reached"

    def _memory_peaks(self) -> tuple[int | None, int | None, int | None]:
        if self.device.type != "cuda":
            return None, None, None
        index = self.device.index or 0
        # Peaks since the process started: resetting them would change what the user's own code reads.
        return (int(torch.cuda.max_memory_allocated(index)), int(torch.cuda.max_memory_reserved(index)),
                int(torch.cuda.get_device_properties(index).total_memory))

    def _fill_memory(self, metrics: Any, memory: Any, peaks: tuple[int | None, int | None, int | None]) -> None:
        if self.device.type == "cuda":
            metrics.peak_memory_bytes, metrics.peak_reserved_bytes, metrics.device_memory_capacity_bytes = peaks
            note = "CUDA memory peaks are since the process started (perfscope does not reset them)"
            if note not in self._results_notes:
                self._results_notes.append(note)
        else:
            metrics.peak_memory_bytes = metrics.host_rss_peak_bytes
            metrics.unavailable["peak_memory_bytes"] = "CPU has no allocator peak: this is the process's peak host RSS"
            metrics.unavailable["peak_reserved_bytes"] = "CPU: no caching allocator"
        if self.model is not None and self.optimizer is not None:
            metrics.memory_breakdown = memory.breakdown(
                self.model, self.optimizer, metrics.peak_memory_bytes if self.device.type == "cuda" else None,
                grads_present=False,
            )
            if self.device.type != "cuda":
                metrics.unavailable["memory_breakdown.activations_and_temporaries"] = "needs the CUDA allocator peak"
        else:
            metrics.unavailable["memory_breakdown"] = "needs Profiler(model, optimizer=...)"

    def _fill_fingerprint(self, metrics: Any) -> None:
        if self._fingerprint is None:
            metrics.unavailable["fingerprint"] = "counted at the FLOP-counting step: " + (
                metrics.unavailable.get("flops_per_step") or "that step was not counted")
            return
        from perfscope.results.fingerprint import MemoryPeak
        from perfscope.trial.loop import MEMORY_PEAK_TOLERANCE

        fingerprint = self._fingerprint
        if self.device.type == "cuda" and metrics.peak_memory_bytes:
            fingerprint.memory = MemoryPeak(bytes=int(metrics.peak_memory_bytes), tolerance=MEMORY_PEAK_TOLERANCE,
                                            source="torch.cuda.max_memory_allocated since the process started")
        else:
            fingerprint.unavailable["memory"] = "CPU: no allocator peak (host RSS varies between identical runs)"
        fingerprint.unavailable["window_syncs"] = (
            "hooks: not counted over the window (your process's warning filters and CUDA sync debug mode are left "
            "alone); a sync every N steps is in the fingerprint only when the counted step hits it")
        metrics.fingerprint = fingerprint

    def _fill_trace(self, metrics: Any) -> None:
        if self.capture_steps is None:
            return
        if self._trace_path is None:
            metrics.unavailable["trace"] = "; ".join(self._trace_notes) or "the capture window was not reached"
            return
        metrics.trace_path = str(self._trace_path)
        try:
            from perfscope.trace.facts import trace_facts

            metrics.trace_facts = trace_facts(self._trace_path, device_type=self.device.type, steps=self._active_steps)
            if metrics.fingerprint is not None:
                from perfscope.measure.structure import fill_kernel_launches

                fill_kernel_launches(metrics.fingerprint, metrics.trace_facts)
        except Exception as exc:  # noqa: BLE001
            metrics.unavailable["trace_facts"] = f"trace analysis failed: {type(exc).__name__}: {exc}"


def _find_place() -> RankPlace | None:
    try:
        from perfscope.hooks.distributed import detect_rank

        return detect_rank()
    except Exception:  # noqa: BLE001 - a torch without torch.distributed, a half-torn-down group: one process
        return None


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _command() -> list[str]:
    """The command that reran this loop, as the report's "Reproduce" shows it."""
    argv = list(sys.argv)
    return ["python", *argv] if argv and argv[0].endswith(".py") else argv


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

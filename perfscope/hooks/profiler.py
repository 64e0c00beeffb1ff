"""Profiling hooks for a training loop you already have: the metrics of `perfscope analyze`, no toggling.

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import perfscope.hooks.observe as observe
from perfscope.hooks.capture import CaptureWindow
from perfscope.hooks.clocks import BoundedSampler, clock_reader
from perfscope.hooks.flopstep import FlopStep
from perfscope.hooks.framework import DATA_SPAN, FrameworkCalls, check_precision
from perfscope.hooks.loggers import Loggers, as_loggers
from perfscope.hooks.ondemand import LiveControl
from perfscope.hooks.stepping import Stepping
from perfscope.hooks.tally import Reservoir, StepTally
from perfscope.hooks.watch import WatchConfig, as_watch
from perfscope.live.protocol import DIR_ENV as LIVE_DIR_ENV
from perfscope.measure.allocator_snapshot import on_oom_snapshot
from perfscope.measure.tokens import leading_dim  # re-exported: the integrations count samples the same way

if TYPE_CHECKING:
    from perfscope.hooks.distributed import RankPlace
    from perfscope.measure.clock import Clock
    from perfscope.results import Results

DISABLE_ENV = "PERFSCOPE_DISABLE"
_INSTANCES = itertools.count()
"""Profilers made in this process: with the save count, the key a rank's summary travels under (ranks make their
profilers in the same order, so rank 0 asks for the keys the others wrote)."""
__all__ = ["DATA_SPAN", "DISABLE_ENV", "Profiler", "disabled_by_env", "leading_dim"]


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def check_arguments(*, warmup_steps: Any, max_step_samples: Any, flush_every: Any, samples_per_step: Any,
                    tokens_per_sample: Any, precision: Any, gather_timeout_s: Any, capture_steps: Any) -> None:
    """A wrong argument is the caller's error, raised at once, naming the argument and what it must be (after
    construction an internal error never reaches the user's loop: the Profiler warns once and disables itself)."""
    for arg, value in (("warmup_steps", warmup_steps), ("max_step_samples", max_step_samples),
                       ("flush_every", flush_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"Profiler({arg}=...) must be an int >= 1, got {value!r}")
    for arg, value in (("samples_per_step", samples_per_step), ("tokens_per_sample", tokens_per_sample)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"Profiler({arg}=...) must be a positive int or None, got {value!r}")
    check_precision(precision)
    if isinstance(gather_timeout_s, bool) or not isinstance(gather_timeout_s, int | float) or not gather_timeout_s > 0:
        raise ValueError(f"Profiler(gather_timeout_s=...) must be a number > 0, got {gather_timeout_s!r}")
    if capture_steps is not None:
        start, stop = capture_steps
        if not (isinstance(start, int) and isinstance(stop, int) and 1 <= start < stop):
            raise ValueError(f"Profiler(capture_steps=(start, stop)) needs 1 <= start < stop, got {capture_steps!r}")


def resolve_device(device: str | torch.device | None, model: torch.nn.Module | None) -> torch.device:
    """"auto": the model's device, else CUDA when available; plain "cuda" is the current device."""
    if device in (None, "auto"):
        param = next(model.parameters(), None) if model is not None else None
        if param is not None:
            return param.device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return resolved


class Profiler(Stepping, FrameworkCalls):
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
        memory: with capture_steps, two more untimed steps after them under torch.profiler's memory profile: the
            memory by category at the peak (parameters, gradients, optimizer state, activations, ...) that the
            memory rules read, as an analyze trial records it (perfscope.trace.memory_categories). Off by default:
            torch's categorisation runs inside your step and takes seconds for a transformer (docs/hooks.md).
        trace_dir: the folder the trace (rank<R>.json.gz) is written to during the run (default: a temporary
            folder); save() copies it into <out>/trace/. A folder of traces only: HTA loads every file in it.
        peak_tflops: the MFU denominator, overriding the datasheet / measured ceiling.
        measure_ceiling: at results()/save() time, measure this machine's matmul ceiling (after the memory peaks
            are read, on the profiler's device, with its own RNG state; a CPU's is cached: measure/ceiling_cache.py).
        max_step_samples: per-step samples kept (a uniform reservoir) for the typical-step description.
        flush_every: read finished CUDA events every this many steps (bounds the pending events).
        gather_timeout_s: in a torchrun job, how long rank 0's save() waits for the other ranks' summaries
            (every rank must call save(); a rank that has not reported by then is named in the results).
        live: accept `perfscope capture` requests from the first timed step (SIGUSR2 where it is free; a path: a
            control folder the ranks share, read every 0.5 s; PERFSCOPE_LIVE_DIR too); False: none.
        watch: catch a lasting step-time shift (a change-point test), log one warning, write what changed and trace
            the steps after it (perfscope.hooks.watch; WatchConfig or its fields as a dict to tune it).
        loggers: write perfscope's figures every 50 timed steps and at save() to TensorBoard (a SummaryWriter),
            W&B (a Run, "wandb") or MLflow ("mlflow", a Run); `Loggers([...], every=N)` for another interval.
        enabled: False (or PERFSCOPE_DISABLE=1 in the environment) makes every call a near-free no-op.
        clock: the boundary and host clock (default: the device's; perfscope.measure.clock), e.g. a test's simulated one.
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
        memory: bool = False,
        trace_dir: str | os.PathLike[str] | None = None,
        peak_tflops: float | None = None,
        measure_ceiling: bool = True,
        max_step_samples: int = 2048,
        flush_every: int = 50,
        gather_timeout_s: float = 300.0,
        live: bool | str | os.PathLike[str] = True,
        watch: bool | WatchConfig | dict[str, Any] = False,
        loggers: Loggers | Iterable[Any] = (),
        enabled: bool = True,
        clock: Clock | None = None,
    ) -> None:
        self.enabled = bool(enabled) and not disabled_by_env()
        self._on = self.enabled  # the hot-path flag: False once disabled, failed or closed
        self._failed = None
        if not self.enabled:
            return
        check_arguments(warmup_steps=warmup_steps, max_step_samples=max_step_samples, flush_every=flush_every,
                        samples_per_step=samples_per_step, tokens_per_sample=tokens_per_sample, precision=precision,
                        gather_timeout_s=gather_timeout_s, capture_steps=capture_steps)
        from perfscope.measure.clock import clock_for

        self.model, self.optimizer = model, optimizer
        self.device = resolve_device(device, model)
        self.samples_per_step, self.tokens_per_sample = samples_per_step, tokens_per_sample
        self.name, self.precision = name, precision
        self.warmup_steps, self.flush_every = warmup_steps, flush_every
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.peak_tflops, self.measure_ceiling = peak_tflops, measure_ceiling
        self.gather_timeout_s = float(gather_timeout_s)
        # A torchrun job: found here, or at the first step when the loop creates its process group later.
        from perfscope.hooks.distributed import find_place  # here: it loads the results model

        self._place = find_place()
        self._instance, self._saves = next(_INSTANCES), 0

        self._clock = clock if clock is not None else clock_for(self.device)
        self._t0 = self._clock.now()
        self._started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._step_index = 0  # the optimizer step in progress (0-based) = steps completed so far
        self._tally = StepTally(samples_per_step)  # the step in progress, and the timed steps' spread
        # Windows of timed steps.
        self._recorder = None
        self._windows = []
        self._reservoir = Reservoir(max_step_samples)
        self._excluded = Counter()  # untimed steps and pauses, by reason: how many, how long
        self._excluded_s = Counter()
        self._pause_reason = None
        self._pause_t0 = 0.0
        self._since_t = self._t0  # host time of the last step boundary or resume: exclude_since_step() counts from it
        self._batch_begun = False  # batch_begin() was called in the step in progress
        self._batch_hooks = False  # a framework marks batch starts: an armed FLOP count starts at the next one
        self._data_hooked = False  # a framework reports its fetches through data_begin()/data_end()
        self._data_recorder = None  # the window a data_begin() opened a wait in
        self._data_span = None  # the perfscope::data span a data_begin() opened in the trace
        self._since_flush = 0
        self._first_marks = []  # [start of step 0, end of step 0], when wrap() saw step 0 begin
        self._wrap_used, self._live_wraps = False, 0
        self._loader_config = {}
        # The trace window, and the one step FLOPs, structure and what the loop runs are counted on.
        self._capture = CaptureWindow(capture_steps, self.trace_dir, categories=memory) if capture_steps is not None else None
        self._flop = FlopStep(index=self._capture.after(warmup_steps) if self._capture else warmup_steps, count_flops=count_flops,
                              user_flops=flops_per_step)
        self._graphs_at_start = observe.graphs_compiled()
        if flops_per_step is None and count_flops and model is not None and hasattr(model, "_orig_mod"):
            self._flop.unavailable = observe.compiled_flops_unavailable("the model is torch.compile'd")
        # Utilization; what results() reads besides.
        self._sampler = BoundedSampler(self.device.type, self.device.index, interval_s=utilization_interval_s,
                                       max_s=utilization_max_s) if sample_utilization else None
        self._environment = None
        self._results_notes = []
        self._described_config = {}  # describe(): TrialConfig fields, and free-form settings
        self._declared = {}
        self._oom = on_oom_snapshot(self.device, self.trace_dir, self._results_notes)  # CUDA: the allocator's state at an OOM
        shared = (os.environ.get(LIVE_DIR_ENV) or None) if live is True else (live or None)  # a control folder
        self._live = LiveControl(shared, rank=int(os.environ.get("RANK", "0")), steps=lambda: self._step_index,
                                 enabled=live is not False)
        self._watch = as_watch(watch, capture=self._live.capture_now, graphs=observe.graphs_compiled, notes=self._results_notes,
                               clocks=clock_reader(self.device))
        self._loggers = as_loggers(loggers, device=self.device, peak_tflops=peak_tflops,
                                   flops_per_step=lambda: flops_per_step or (self._flop.flops or (None,))[0])
        feeds = [c.add for c in (self._reservoir, self._loggers, self._watch) if c is not None]  # each timed step, as read
        self._on_record = feeds[0] if len(feeds) == 1 else lambda record: [feed(record) for feed in feeds]
        self._poll_every = flush_every if len(feeds) == 1 else 1  # the watch and loggers read each step at its end

    # ----------------------------------------------------------------------------- public, hot path

    def wrap(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Iterate ``loader`` through the profiler: batches pass unchanged, time blocked in next() is measured."""
        if not self._on:
            return iter(loader)
        try:
            self._wrap_used = True
            self.describe_loader(loader)
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
        try:
            self._tally.micro_step(samples)
        except Exception as exc:  # noqa: BLE001
            self._fail("micro_step()", exc)

    @contextmanager
    def step_context(self, samples: int | None = None) -> Iterator[None]:
        """``with prof.step_context(): ...`` = the body, then `step()` (not when the body raises)."""
        yield
        self.step(samples)

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
            from perfscope.hooks.results import build_results

            self._environment = (results := build_results(self, ratios=ratios)).environment  # probed once
            return results
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
        from perfscope.hooks.save import save_alone, save_job

        self._saves += 1  # with the instance, the key a job's rank summaries of this save() travel under
        return save_job(self, self._place, out_dir, final) if self._place is not None else save_alone(self, out_dir, final)

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
        try:
            self._end_data_span()
        except Exception:  # noqa: BLE001
            self._data_span = None
        self._flop.teardown()
        if self._capture is not None:
            self._capture.teardown()
        self._live.close()
        try:
            if self._sampler is not None:
                self._sampler.stop()
        except Exception:  # noqa: BLE001
            self._sampler = None

"""The measured training loop of one trial (runs inside the trial process). Design notes: docs/measurement.md."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfscope.knobs import Knob, Observed, active_knobs
from perfscope.knobs.compile import compile_not_applied
from perfscope.measure import memory
from perfscope.measure.build import attach_trace, build_trial_metrics
from perfscope.measure.clock import clock_for, synchronize
from perfscope.measure.observation import FirstStep, FlopCount, MemoryPeaks, RunObservation, Unavailable
from perfscope.measure.structure import CompileCounters, WindowSyncCounter
from perfscope.measure.tokens import TokenTally
from perfscope.measure.utilization import UtilizationSampler
from perfscope.measure.window import GcPauses, WindowRecorder
from perfscope.results import TrialMetrics
from perfscope.results.config import TrialConfig
from perfscope.results.fingerprint import Fingerprint
from perfscope.results.messages import Message, error, msg
from perfscope.tf32_api import matmul_tf32 as matmul_tf32_state
from perfscope.trace.memory_categories import profile_step_memory
from perfscope.trial.data_parallel import local_optimizer, max_over_ranks
from perfscope.trial.pipeline_parallel import PipelineStep
from perfscope.trial.step import TrainStep, optimizer_name
from perfscope.wording import words
from perfscope.workload import Workload


def calibrate_steps(config: TrialConfig, warmup_times: list[float]) -> tuple[int, str]:
    """Timed steps so the window lasts at least ``min_window_s`` (pyperf-style), and why that many."""
    if config.steps is not None:
        return config.steps, f"{config.steps} steps as asked (--steps)"
    steady = warmup_times[1:] or warmup_times
    estimate = statistics.median(steady) if steady else 0.0
    wanted = math.ceil(config.min_window_s / estimate) if estimate > 0 else config.min_steps
    pipeline = 0
    if config.num_workers:
        depth = config.num_workers * (config.prefetch_factor or 2)
        pipeline = 3 * math.ceil(depth / config.grad_accum_steps)
    steps = min(max(wanted, config.min_steps, pipeline), config.max_steps)
    return steps, f"{steps} steps: ≥ {config.min_window_s:g} s at ~{estimate * 1e3:.3g} ms/step (min {config.min_steps}, max {config.max_steps})"


def timed_call(device: str, call: Callable[[], Any]) -> tuple[Any, float]:
    """``call()``'s result and its wall seconds, the device idle at both ends (a step, not its queued kernels)."""
    synchronize(device)
    start = time.perf_counter()
    out = call()
    synchronize(device)
    return out, time.perf_counter() - start


def _compiled_graphs(counters: CompileCounters) -> int | None:
    """Graphs dynamo compiled in this trial so far (None: dynamo never ran)."""
    facts = counters.facts()
    return facts.graphs if facts is not None else None


def _compiled_frames() -> int | None:
    """Frames torch.compile has compiled so far in this process (grows on every recompilation)."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


@dataclass
class MeasuredRun:
    """A finished timed window, and the live training step a trace can still be captured from."""

    metrics: TrialMetrics
    step: TrainStep
    gc_pauses: GcPauses | None = None
    """Python GC collections inside the timed window (a GC straggler stalls every rank of a data-parallel job)."""


def run_trial(workload: Workload, config: TrialConfig) -> MeasuredRun:
    """Measure one configuration; see the module docstring for the order of work."""
    device = config.device
    compile_counters = CompileCounters()

    # A pipeline rank runs its schedule's step; TrainStep applies TP (and data parallelism) in its wrap_model.
    step = PipelineStep(workload, config) if config.pipeline_parallel > 1 else TrainStep(workload, config)
    # After the user's file, workload() and model() ran: a knob that is off (tf32=None) keeps, and the run
    # records, their own setting.
    for knob in step.knobs:
        knob.before_steps(config)
    matmul_tf32 = matmul_tf32_state().enabled

    warmup_times: list[float] = []
    before: list[torch.Tensor] = []  # every step's loss before the window: the guard compares global steps
    first_grad_norm = None
    for i in range(config.effective_warmup_steps):
        (loss, norm), seconds = timed_call(device, lambda: step(grad_norm=i == 0))  # noqa: B023 - called at once
        warmup_times.append(seconds)
        before.append(loss)
        if i == 0:
            first_grad_norm = norm
            compile_counters.mark_first_step()
    drain = drain_prefetch(step, config, warmup_times) if workload.dataset is not None else None
    steps, calibration = calibrate_steps(config, drain.calibration_times if drain else warmup_times)
    calibration += f"; {drain.words}" if drain else ""
    before += drain.losses if drain else []
    # Every rank runs the same number of steps, or one rank's extra all-reduce pairs with a peer's next collective.
    if (agreed := max_over_ranks(steps, device)) != steps:
        steps, calibration = agreed, f"{agreed} steps: the most any rank calibrated (this rank: {calibration})"
    if config.compile is not None and (why := compile_not_applied(_compiled_graphs(compile_counters))):
        raise CompileNotApplied(f"{words(why)}, during warm-up")

    memory.reset_peak(device)
    frames_before = _compiled_frames()
    losses: list[torch.Tensor] = []
    sampler = UtilizationSampler(device=device) if config.sample_utilization else None
    recorder = WindowRecorder(clock_for(device), nvml_handle=sampler.nvml_handle if sampler is not None else None)
    window_syncs = WindowSyncCounter(device)  # syncs of every timed step, counted without adding one (CUDA)
    gc_pauses = GcPauses(step_of=lambda: len(losses))  # the step a collection lands in: the one running
    with step.contexts("window_context"), sampler if sampler is not None else nullcontext(), gc_pauses:
        synchronize(device)  # the window starts from an idle device; no synchronization inside it
        step.window_tokens = TokenTally()
        recorder.start()
        with window_syncs:
            for i in range(steps):
                loss, norm = step(recorder, grad_norm=first_grad_norm is None and i == 0)
                if norm is not None:
                    first_grad_norm = norm
                losses.append(loss)
                recorder.step_end(samples=config.samples_per_step, micro_steps=config.grad_accum_steps)
        window = recorder.finish()
        tokens, step.window_tokens = step.window_tokens, None
        recorded = record(step.knobs, config)  # inside the knobs' window contexts: what the steps ran with
    frames_after = _compiled_frames()
    peak_allocated, peak_reserved = memory.device_peaks(device)
    peaks = MemoryPeaks(device_type=device, allocated=peak_allocated, reserved=peak_reserved,
                        capacity=memory.device_capacity(device), scope="over the timed window",
                        host_rss=memory.process_peak_rss_bytes())
    owners = memory.breakdown(step.model, local_optimizer(step.optimizer), None, grads_present=False)
    flops = _flop_count(step, config, tokens)  # outside the window, after the memory peaks: they are the window's
    fingerprint = _structure(step)
    metrics = build_trial_metrics(RunObservation(
        device_type=device, windows=[window], records=recorder.records, micro_batch_size=config.micro_batch_size,
        grad_accum_steps=config.grad_accum_steps, warmup_steps=config.effective_warmup_steps,
        tokens_per_sample=workload.tokens_per_sample, memory=peaks, owners=owners, flops=flops, fingerprint=fingerprint,
        compile_facts=compile_counters.facts() if config.compile is not None else None,
        window_syncs=Unavailable(window_syncs.reason) if window_syncs.reason is not None else window_syncs.result(steps),
        first_step=FirstStep(seconds=warmup_times[0], compiled=config.compile is not None) if warmup_times else None,
        utilization=sampler.result() if sampler is not None else None,
        losses=[float(v) for v in torch.stack(losses).cpu()], first_grad_norm=first_grad_norm,
        losses_before_window=[float(v) for v in torch.stack(before).cpu()] if before else [],
        optimizer=optimizer_name(local_optimizer(step.optimizer)), calibration=calibration,
        recompiles_in_window=frames_after - frames_before if frames_before is not None and frames_after is not None else None,
        matmul_tf32=matmul_tf32 if matmul_tf32 is not None else Unavailable(
            msg("tf32_state_unknown", why=matmul_tf32_state().reason or "unknown")),
    ))
    seen = Observed(compiled_graphs=_compiled_graphs(compile_counters) if config.compile is not None else None,
                    recorded=recorded,
                    env={k: os.environ.get(k) for k in config.env},
                    matmul_flops_by_dtype=metrics.fingerprint.matmul_flops_by_dtype if metrics.fingerprint else None)
    metrics.not_applied = not_applied(config, seen)
    metrics.gc_collections, metrics.gc_pause_s = gc_pauses.collections, gc_pauses.pause_s
    metrics.step_gc_pause_s = gc_pauses.per_step(steps)
    return MeasuredRun(metrics=metrics, step=step, gc_pauses=gc_pauses)


def _flop_count(step: TrainStep, config: TrialConfig, tokens: TokenTally | None) -> FlopCount | Unavailable:
    """FLOPs of one step (TrainStep.count_flops); a failure (an OOM too) costs the count, never the timing."""
    if not config.count_flops:
        return Unavailable(msg("flops_disabled"))
    try:
        model_flops, hardware_flops, notes = step.count_flops(tokens)
    except Exception as exc:  # noqa: BLE001
        return Unavailable(msg("flops_failed", error=error(exc)))
    return FlopCount(model=model_flops, hardware=hardware_flops, notes=notes)


def _structure(step: TrainStep) -> Fingerprint | Unavailable:
    """The structural fingerprint (perfscope.results.fingerprint), outside the timed window; a failure costs
    the fingerprint, never the timing."""
    try:
        return step.count_structure()
    except Exception as exc:  # noqa: BLE001 - an OOM or an op the mode cannot pass must not lose the timing
        return Unavailable(msg("structure_failed", error=error(exc)))


class CompileNotApplied(RuntimeError):
    """torch.compile fell back to eager: the trial did not measure what it says (recorded as an error)."""


def capture_trace(run: MeasuredRun, config: TrialConfig, artifacts_dir: Path) -> None:
    """A short profiled window after the timed one, so profiling never touches the timings, into the run's artifacts
    folder; a failure costs the trace (in ``unavailable``), never the run."""
    metrics = run.metrics
    try:
        from perfscope.trace.capture import TraceCapture
    except ImportError as exc:
        metrics.unavailable["trace"] = msg("trace_capture_unavailable", error=str(exc))
        return
    try:
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        # A folder of its own (HTA loads every trace in a folder), steps labelled by the run's step count.
        with TraceCapture(artifacts_dir / "trace", device=config.device, first_step=run.step.steps_done) as cap:
            for _ in range(cap.total_steps):
                run.step()
                cap.step()
        if cap.path is None:
            metrics.unavailable["trace"] = msg("trace_not_captured", notes=[cap.note or msg("trace_unavailable")])
        else:
            attach_trace(metrics, cap.path, device_type=config.device, steps=cap.active,
                         alignment_precision=config.precision)
    except Exception as exc:  # noqa: BLE001 - the trace is optional, the measurement is not
        metrics.unavailable["trace"] = msg("trace_capture_failed", error=error(exc))
        return
    capture_memory_categories(run, config)


def capture_memory_categories(run: MeasuredRun, config: TrialConfig) -> None:
    """Two more steps under torch.profiler's memory profile: the category that holds the peak, for the memory rules.
    A failure (a profiler already running, an OOM) costs the record, in ``unavailable``, never the run."""
    try:
        run.metrics.memory_categories = profile_step_memory(run.step, config.device)
    except Exception as exc:  # noqa: BLE001 - the record is optional, the measurement is not
        run.metrics.unavailable["memory_categories"] = msg("memory_categories_failed", error=error(exc))


def nonfinite_loss(losses: list[float]) -> str | None:
    """"loss became nan at measured step 3", or None when every measured loss is finite."""
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    return None if bad is None else f"loss became {losses[bad]} at measured step {bad}"


def record(knobs: list[Knob], config: TrialConfig) -> dict[str, Any]:
    """What each of ``knobs`` records for its `Knob.not_applied` at the end of the timed window."""
    return {k.id: value for k in knobs if (value := k.record(config)) is not None}


def not_applied(config: TrialConfig, seen: Observed) -> dict[str, Message]:
    """TrialConfig field -> why this run did not run with it (empty: it did everything its config says).

    Each active knob judges its own setting (`Knob.not_applied`), keyed by its first setting (``knob_settings.<id>``
    for a knob with no field); the environment is checked here, whoever set it (a knob or the user)."""
    out: dict[str, Message] = {}
    knobs = active_knobs(config)
    for knob in knobs:
        if (why := knob.not_applied(config, seen)) is not None:
            out[knob.settings[0]] = why
    if orphans := sorted(set(config.knob_settings) - {k.id for k in knobs}):
        # A knob registered at run time in the analyze process is unknown to a trial process started afresh.
        out["knob_settings"] = msg("knob_unregistered", knobs=orphans)
    changed = {k: [seen.env.get(k), v] for k, v in config.env.items() if seen.env.get(k, v) != v}
    if changed:
        out["env"] = msg("env_set_back", changed=changed)
    return out


DRAIN_DEPTHS = 4
DRAIN_WAIT_S = 1e-3
DRAIN_WAIT_SHARE = 0.05
BLOCKED_OVER_READY = 3.0


class DataWaits:
    """Times each `next(loader)` of a step (the data_begin/data_end pair TrainStep calls on a recorder)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._start = 0.0

    def data_begin(self) -> None:
        self._start = time.perf_counter()

    def data_end(self) -> None:
        self.waits.append(time.perf_counter() - self._start)


@dataclass
class PrefetchDrain:
    depth: int
    """Micro-batches the queue holds: num_workers × prefetch_factor."""
    times: list[float] = field(default_factory=list)
    """Wall time of each extra warm-up step."""
    losses: list[torch.Tensor] = field(default_factory=list)
    """Each extra step's loss (device tensors): steps the trial took before its window, which the numerics guard
    counts so that it compares the same global step in every trial (perfscope.search.numerics)."""
    drained: bool = False

    @property
    def calibration_times(self) -> list[float]:
        """Steady-state step times for the window's calibration (a first entry, dropped by it as the warm-up's)."""
        return [self.times[0], *self.times]

    @property
    def words(self) -> str:
        steps = f"{len(self.times)} extra warm-up step(s)"
        if self.drained:
            return (f"{steps}: the DataLoader's prefetch queue ({self.depth} batches) used up and drained "
                    "(next() blocked): the window starts in steady state")
        return (f"{steps}: the DataLoader's prefetch queue ({self.depth} batches) used up {DRAIN_DEPTHS} times without "
                "next() blocking beyond a ready batch's cost (the loader keeps up; a full queue is its steady state)")


def drain_prefetch(step: Callable[[Any], tuple[torch.Tensor, Any]], config: TrialConfig, warmup_times: list[float]) -> PrefetchDrain | None:
    """Untimed steps until the prefetch queue is in steady state (see the module docstring); None without workers
    or when the user's batches() feeds the loop (no DataLoader perfscope controls)."""
    if not config.num_workers:
        return None
    depth = config.num_workers * (config.prefetch_factor or 2)
    typical = statistics.median(warmup_times[1:]) if len(warmup_times) > 1 else 0.0
    floor = max(DRAIN_WAIT_S, DRAIN_WAIT_SHARE * typical)
    first_depth = math.ceil(depth / config.grad_accum_steps)
    drain = PrefetchDrain(depth=depth)
    ready: list[float] = []
    for i in range(math.ceil(DRAIN_DEPTHS * depth / config.grad_accum_steps)):
        waits = DataWaits()
        (loss, _), seconds = timed_call(config.device, lambda: step(waits))  # noqa: B023 - called at once
        drain.times.append(seconds)
        drain.losses.append(loss)
        if i < first_depth:  # the warm-up's backlog: what taking a ready batch costs
            ready += waits.waits
            continue
        blocked_at = max(floor, BLOCKED_OVER_READY * statistics.median(ready)) if ready else floor
        # Drained when any rank is: every rank must take the same number of steps (collectives).
        if not max_over_ranks(max(waits.waits, default=0.0) < blocked_at, config.device):
            drain.drained = True
            break
    return drain

"""The measured training loop of one trial (runs inside the trial process).

    run = run_trial(workload, TrialConfig(device="cuda", micro_batch_size=8))
    run.metrics.samples_per_s                      # samples in the window / its wall time
    capture_trace(run, config, artifacts_dir)      # afterwards, once the timing is safely recorded

Order of work, and why:
1. Build everything from the same seed, so every trial starts from the same weights and batches.
2. Warm-up steps (untimed, each synchronized): allocator growth, cuDNN autotuning, torch.compile (≥ 1
   step) and CUDA-graph recording (≥ 3). The first step's time is the compile time; the others calibrate
   how many steps make a window of at least `min_window_s` (pyperf-style). With DataLoader workers, more
   steps until the prefetch queue is in steady state (trial/prefetch.py).
3. One timed window (perfscope.measure.window): step boundaries and data waits as clock marks — CUDA
   events, no per-step synchronization —, other processes' load recorded, NVML/psutil sampled in a
   thread, losses kept on the device and read after. Recompilations inside the window are counted.
4. Outside the window: memory owners, FLOPs of one step on the eager model. The profiler trace is a
   separate, later window (`capture_trace`), so nothing it does can cost the measurement.
Exceptions propagate: the trial process classifies them (OOM, error).
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import time
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from perfscope.measure import memory
from perfscope.measure.clock import clock_for, synchronize
from perfscope.measure.build import attach_trace, build_trial_metrics
from perfscope.measure.flops import (
    FALLBACK_COUNT_MICRO_BATCH,
    StepFlopCounter,
    count_step,
    count_step_on_fake_tensors,
)
from perfscope.measure.gc_pauses import GcPauses
from perfscope.measure.observation import FirstStep, FlopCount, MemoryPeaks, RunObservation, Unavailable
from perfscope.measure.structure import CompileCounters, StructureCounter, WindowSyncCounter
from perfscope.measure.tokens import TokenTally, per_token_scale
from perfscope.measure.tf32 import matmul_tf32 as matmul_tf32_state
from perfscope.measure.utilization import UtilizationSampler
from perfscope.measure.window import WindowRecorder
from perfscope.results import TrialMetrics
from perfscope.results.config import TrialConfig
from perfscope.results.fingerprint import Fingerprint
from perfscope.knobs import Knob, active_knobs, loader_options
from perfscope.trial.applied import Observed, compile_not_applied, not_applied
from perfscope.knobs.apply.checkpointing import CheckpointedBlock, checkpointing_off
from perfscope.trial.data import endless_batches, to_device
from perfscope.trial.data_parallel import agree_on_steps, gradient_sync, local_optimizer, shard_optimizer, wrap_model
from perfscope.trial.optimizers import build_optimizer, optimizer_name
from perfscope.trial.prefetch import drain_prefetch
from perfscope.workload import Workload


class TrainStep:
    """One optimizer step: grad_accum_steps micro-batches, the active knobs' contexts and loss scaler,
    zero_grad(set_to_none).

    The knobs apply themselves (perfscope.knobs, `Knob`'s trial hooks): this class calls each active
    knob's hook at its place in the step and knows none of them by name. The micro-batch and the accumulation
    are the step's own shape; the data-parallel wrapper and the optimizer are built by their modules."""

    def __init__(self, workload: Workload, config: TrialConfig) -> None:
        self.workload, self.config = workload, config
        self.device = config.device
        self.knobs: list[Knob] = active_knobs(config)
        torch.manual_seed(config.seed)
        self.model = self.prepared(workload.model().to(self.device))
        self.checkpointed = [m for m in self.model.modules() if isinstance(m, CheckpointedBlock)]
        self.model.train()
        self.wrapped = wrap_model(self.model, config, self.device, workload=workload)
        """The module each step runs: the model, or its DDP / FSDP2 wrapper on a data-parallel rank."""
        self.optimizer = shard_optimizer(build_optimizer(workload, self.wrapped, config), config)
        self.step_model: Any = self.wrapped
        for knob in self.knobs:
            self.step_model = knob.apply_to_step_module(self.step_model, config)
        self.scaler = next((s for k in self.knobs if (s := k.grad_scaler(config)) is not None), None)
        self.batches = endless_batches(workload, config)
        self.non_blocking = bool(loader_options(config).get("pin_memory")) and self.device == "cuda"
        self.steps_done = 0
        """Optimizer steps taken so far: the training-step number a trace labels its steps by."""
        self.window_tokens: TokenTally | None = None  # set during the timed window: each micro-batch's tokens

    def prepared(self, model: Any) -> Any:
        """A freshly built model as the active knobs want it (checkpointed blocks, channels_last)."""
        for knob in self.knobs:
            model = knob.apply_to_model(model, self.config, self.workload)
        return model

    def on_device(self, batch: Any, *, non_blocking: bool) -> Any:
        """A batch copied to the device, as the active knobs want it (channels_last inputs)."""
        batch = to_device(batch, self.device, non_blocking=non_blocking)
        for knob in self.knobs:
            batch = knob.apply_to_batch(batch, self.config)
        return batch

    def contexts(self, which: str) -> AbstractContextManager[Any]:
        """The active knobs' contexts of one kind ("loss_context", "step_context", "window_context"), entered in order."""
        contexts = [c for k in self.knobs if (c := getattr(k, which)(self.config)) is not None]
        if not contexts:
            return nullcontext()
        stack = ExitStack()
        for context in contexts:
            stack.enter_context(context)
        return stack

    def next_batch(self, recorder: WindowRecorder | None) -> Any:
        # The data span covers next() only: the host-to-device copy below is not data loading.
        with torch.profiler.record_function("perfscope::data"):
            if recorder is not None:
                recorder.data_begin()
            batch = next(self.batches)
            if recorder is not None:
                recorder.data_end()
        if self.window_tokens is not None:
            self.window_tokens.add(batch)
        with torch.profiler.record_function("perfscope::h2d"):
            return self.on_device(batch, non_blocking=self.non_blocking)

    def micro_loss(self, model: Any, batch: Any) -> torch.Tensor:
        with self.contexts("loss_context"):  # autocast
            return self.workload.loss(model, batch)

    def __call__(self, recorder: WindowRecorder | None = None, *, grad_norm: bool = False) -> tuple[torch.Tensor, float | None]:
        """Returns (mean loss as a device tensor, first-step grad norm when asked)."""
        accum = self.config.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for i in range(accum):
            batch = self.next_batch(recorder)
            # no_sync: the gradients of all micro-batches but the last stay local (one all-reduce per step).
            with gradient_sync(self.wrapped, enabled=not self.config.no_sync or i == accum - 1):
                with self.contexts("step_context"):  # e.g. activation offloading's saved-tensor hooks
                    loss = self.micro_loss(self.step_model, batch)
                scaled = loss / accum
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total += loss.detach().float()
        norm = None
        if grad_norm:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            grads = [_full(p.grad).detach().float().norm() for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.stack(grads).norm()) if grads else 0.0
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return total / accum, norm

    def count_flops(self, tokens: TokenTally | None = None) -> tuple[float, float, list[str]]:
        """(model FLOPs, hardware FLOPs, notes) per optimizer step, on the eager model: one micro-batch × accum.

        Counted on fake tensors (no device memory, no compute), so the count cannot OOM where the trial fit: the
        checkpointing pair runs twice the micro-batch that fit without checkpointing. With checkpointing the step
        is counted twice: blocks plain (model FLOPs, MFU) and checkpointed as it runs (hardware FLOPs with the
        recompute that really happened, HFU). Where fake tensors fail, one real step at a small micro-batch,
        scaled linearly: matmul, conv and attention FLOPs are proportional to the batch. When the window's ``tokens``
        varied (dynamic padding), FLOPs per token × the window's mean tokens per micro-batch (measure/tokens.py).
        """
        micro, accum = self.config.micro_batch_size, self.config.grad_accum_steps

        def on_device(batch: Any) -> Any:
            return self.on_device(batch, non_blocking=False)

        def plain(counter: StepFlopCounter) -> AbstractContextManager[None]:
            return checkpointing_off(self.checkpointed)

        model = self.model
        if self.config.data_parallel == "fsdp" or self.config.tensor_parallel > 1:
            # Sharded parameters are DTensors: count on a fresh, unsharded copy, on the host (FLOPs do not depend on
            # where they run, and fake tensors allocate nothing).
            model = self.prepared(self.workload.model())

            def on_device(batch: Any) -> Any:
                return batch

        fake_batch = counted_batch = next(self.batches)
        try:
            counter = count_step_on_fake_tensors(model, fake_batch, self.micro_loss, around=plain, prepare=on_device)
            as_run = (count_step_on_fake_tensors(model, fake_batch, self.micro_loss, prepare=on_device)
                      if self.checkpointed else counter)
            scale = 1.0
            method = f"FLOPs counted on fake tensors (FakeTensorMode: shapes only, no memory or compute) at micro-batch {micro}"
        except Exception as exc:  # noqa: BLE001 - an op without a fake kernel, a data-dependent shape, ...
            small = min(micro, FALLBACK_COUNT_MICRO_BATCH)
            loader_config = self.config.replace(micro_batch_size=small, num_workers=0, persistent_workers=False,
                                                prefetch_factor=None, pin_memory=False)
            batch = counted_batch = on_device(next(endless_batches(self.workload, loader_config)))
            counter = count_step(model, batch, self.micro_loss, around=plain)
            as_run = count_step(model, batch, self.micro_loss) if self.checkpointed else counter
            self.optimizer.zero_grad(set_to_none=True)
            scale = micro / small
            first_line = str(exc).splitlines()[0][:160] if str(exc) else ""
            why = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
            method = (f"fake-tensor FLOP counting failed ({why}): counted one real micro-step at micro-batch {small} "
                      f"and scaled ×{scale:g} to micro-batch {micro} (matmul/conv/attention FLOPs are linear in the batch)")
        if (per_token := per_token_scale(counted_batch, tokens)) is not None:
            scale, method = per_token.factor, f"{method}; {per_token.note}"
        model_flops = counter.model_total * scale * accum
        hardware_flops = as_run.total * scale * accum
        notes = [method, *counter.notes]
        if (tp := self.config.tensor_parallel) > 1:  # each rank of a TP group computes its share of one replica's step
            model_flops, hardware_flops = model_flops / tp, hardware_flops / tp
            notes.append(f"the replica's step ÷ tp = {tp} (embeddings, norms and the head, replicated, are computed on "
                         "every rank: a slight undercount per rank)")
        if self.checkpointed:
            extra = as_run.total / counter.total - 1 if counter.total else 0.0
            notes.append(f"activation checkpointing of {len(self.checkpointed)} blocks: the step as run recomputes "
                         f"{extra:+.0%} FLOPs (counted with checkpointing on: HFU > MFU)")
        return model_flops, hardware_flops, notes

    def count_structure(self) -> Fingerprint:
        """One real optimizer step (the trial's own: micro-batch, accumulation, autocast, optimizer) under a
        counting dispatch mode: the structural fingerprint. Run after the timed window; it trains one more step."""
        with StructureCounter(self.device) as counter:
            self()
        method = ("one real optimizer step after the timed window, counted under a dispatch mode "
                  f"(micro-batch {self.config.micro_batch_size} × {self.config.grad_accum_steps})")
        if self.config.compile is not None:
            method += "; torch.compile does not trace under a dispatch mode, so ops are those of the eager step"
        return counter.fingerprint(method=method)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) gradient gathered whole, so its norm is the model's, not this rank's shard's."""
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t




def calibrate_steps(config: TrialConfig, warmup_times: list[float]) -> tuple[int, str]:
    """Timed steps so the window lasts at least ``min_window_s`` (pyperf-style), and why that many.

    The estimate is the median of the warm-up steps after the first (which pays one-time costs). With
    DataLoader workers the window also spans several fill-and-drain cycles of the prefetch queue.
    """
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
    from perfscope.trial.model_parallel import make_step

    step = make_step(workload, config)  # TrainStep, or a pipeline rank's PipelineStep
    # After the user's file, workload() and model() ran: a knob that is off (tf32=None) keeps, and the run
    # records, their own setting.
    for knob in step.knobs:
        knob.before_steps(config)
    matmul_tf32 = matmul_tf32_state().enabled

    warmup_times: list[float] = []
    first_grad_norm = None
    for i in range(config.effective_warmup_steps):
        synchronize(device)
        start = time.perf_counter()
        _, norm = step(grad_norm=i == 0)
        synchronize(device)
        warmup_times.append(time.perf_counter() - start)
        if i == 0:
            first_grad_norm = norm
            compile_counters.mark_first_step()
    drain = drain_prefetch(step, config, warmup_times) if workload.dataset is not None else None
    steps, calibration = calibrate_steps(config, drain.calibration_times if drain else warmup_times)
    calibration += f"; {drain.words}" if drain else ""
    if (agreed := agree_on_steps(steps, device)) != steps:
        steps, calibration = agreed, f"{agreed} steps: the most any rank calibrated (this rank: {calibration})"
    if config.compile is not None and (why := compile_not_applied(_compiled_graphs(compile_counters))):
        raise CompileNotApplied(f"{why}, during warm-up")

    memory.reset_peak(device)
    frames_before = _compiled_frames()
    losses: list[torch.Tensor] = []
    sampler = UtilizationSampler(device=device) if config.sample_utilization else None
    recorder = WindowRecorder(clock_for(device), nvml_handle=sampler.nvml_handle if sampler is not None else None)
    window_syncs = WindowSyncCounter(device)  # syncs of every timed step, counted without adding one (CUDA)
    gc_pauses = GcPauses()
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
        gc_enabled, gc_frozen = gc.isenabled(), gc.get_freeze_count()  # inside the GC mode: what the steps ran with
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
        optimizer=optimizer_name(local_optimizer(step.optimizer)), calibration=calibration,
        recompiles_in_window=frames_after - frames_before if frames_before is not None and frames_after is not None else None,
        matmul_tf32=matmul_tf32 if matmul_tf32 is not None else Unavailable(matmul_tf32_state().reason or "unknown"),
    ))
    seen = Observed(compiled_graphs=_compiled_graphs(compile_counters) if config.compile is not None else None,
                    matmul_tf32=matmul_tf32_state().enabled, gc_enabled=gc_enabled, gc_frozen_objects=gc_frozen,
                    env={k: os.environ.get(k) for k in config.env},
                    matmul_flops_by_dtype=metrics.fingerprint.matmul_flops_by_dtype if metrics.fingerprint else None)
    metrics.not_applied = not_applied(config, seen)
    return MeasuredRun(metrics=metrics, step=step, gc_pauses=gc_pauses)


def _flop_count(step: TrainStep, config: TrialConfig, tokens: TokenTally | None) -> FlopCount | Unavailable:
    """FLOPs of one step (TrainStep.count_flops); a failure (an OOM too) costs the count, never the timing."""
    if not config.count_flops:
        return Unavailable("FLOP counting disabled for this trial")
    try:
        model_flops, hardware_flops, notes = step.count_flops(tokens)
    except Exception as exc:  # noqa: BLE001
        return Unavailable(f"FLOP counting failed: {type(exc).__name__}: {exc}")
    return FlopCount(model=model_flops, hardware=hardware_flops, notes=notes)


def _structure(step: TrainStep) -> Fingerprint | Unavailable:
    """The structural fingerprint (perfscope.results.fingerprint), outside the timed window; a failure costs
    the fingerprint, never the timing."""
    try:
        return step.count_structure()
    except Exception as exc:  # noqa: BLE001 - an OOM or an op the mode cannot pass must not lose the timing
        return Unavailable(f"structure counting failed: {type(exc).__name__}: {exc}")


class CompileNotApplied(RuntimeError):
    """torch.compile fell back to eager: the trial did not measure what it says (recorded as an error)."""


def capture_trace(run: MeasuredRun, config: TrialConfig, artifacts_dir: Path) -> None:
    """A short profiled window after the timed one, so profiling never touches the timings.

    Called after the timed result is safely written: whatever happens here (a profiler already running in
    the user's code, an over-cap trace, an OOM, an exception in export) costs the trace, never the run.
    """
    metrics = run.metrics
    try:
        from perfscope.trace.capture import TraceCapture
    except ImportError as exc:
        metrics.unavailable["trace"] = f"trace capture not available: {exc}"
        return
    try:
        # A folder of its own (HTA loads every trace in a folder), steps labelled by the run's step count.
        with TraceCapture(artifacts_dir / "trace", device=config.device, first_step=run.step.steps_done) as cap:
            for _ in range(cap.total_steps):
                run.step()
                cap.step()
    except Exception as exc:  # noqa: BLE001
        metrics.unavailable["trace"] = f"trace capture failed: {type(exc).__name__}: {exc}"
        return
    if cap.path is None:
        metrics.unavailable["trace"] = cap.note or "trace unavailable"
        return
    attach_trace(metrics, cap.path, device_type=config.device, steps=cap.active_steps, alignment_precision=config.precision)


def all_finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def nonfinite_loss(losses: list[float]) -> str | None:
    """"loss became nan at measured step 3", or None when every measured loss is finite."""
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    return None if bad is None else f"loss became {losses[bad]} at measured step {bad}"


def capture_trace_into(run: MeasuredRun, config: TrialConfig, artifacts_dir: Path) -> None:
    """`capture_trace` into the run's artifacts folder; a failure costs the trace (in ``unavailable``), never the run."""
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    try:
        capture_trace(run, config, artifacts_dir)
    except Exception as exc:  # noqa: BLE001 - the trace is optional, the measurement is not
        run.metrics.unavailable["trace"] = f"trace capture failed: {type(exc).__name__}: {exc}"

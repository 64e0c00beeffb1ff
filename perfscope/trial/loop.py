"""The measured training loop of one trial (runs inside the trial process).

    metrics = run_trial(workload, TrialConfig(device="cuda", micro_batch_size=8), artifacts_dir)

Order of work, and why:
1. Build everything from the same seed, so every trial starts from the same weights and batches.
2. Warm-up steps (untimed): allocator growth, cuDNN autotuning, torch.compile. The first step is timed
   on its own (synchronized) to report compile time apart from the steady state.
3. Timed steps: step boundaries as CUDA events (no per-step sync; see measure.timing), data-iterator
   waits on the host clock, NVML/psutil sampled in a thread, losses kept on the device and read after.
4. Outside the timed region: FLOPs of one micro-step on the eager model, memory owners, optional trace.
Exceptions propagate: the trial process classifies them (OOM, error).
"""

from __future__ import annotations

import gc
import inspect
import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfscope.measure import memory
from perfscope.measure.flops import (
    FALLBACK_COUNT_MICRO_BATCH,
    FLOP_CONVENTION,
    StepFlopCounter,
    count_step,
    count_step_on_fake_tensors,
)
from perfscope.measure.tf32 import apply_matmul_tf32
from perfscope.measure.tf32 import matmul_tf32 as matmul_tf32_state
from perfscope.measure.timing import StepTimer, synchronize
from perfscope.measure.utilization import UtilizationSampler
from perfscope.results import TrialMetrics
from perfscope.stats import summarize
from perfscope.trial.checkpointing import (
    CheckpointedBlock,
    apply_checkpointing,
    counting_recompute,
    recompute_flops,
)
from perfscope.trial.config import TrialConfig
from perfscope.trial.data import endless_batches, to_device
from perfscope.workload import Workload

_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build_optimizer(workload: Workload, model: nn.Module, impl: str) -> torch.optim.Optimizer:
    """The user's optimizer, rebuilt with foreach=True / fused=True when the config asks for it."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = workload.optimizer(params)
    if impl == "default":
        return optimizer
    # Rebuild from the user's settings, keeping only what the constructor accepts (defaults can hold
    # derived keys, e.g. AdamW's decoupled_weight_decay) and dropping the implementation flags.
    accepted = set(inspect.signature(type(optimizer).__init__).parameters) - {"self", "params", "foreach", "fused"}
    groups = [{k: v for k, v in g.items() if k == "params" or k in accepted} for g in optimizer.param_groups]
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    return type(optimizer)(groups, **defaults, **{impl: True})


class TrainStep:
    """One optimizer step: grad_accum_steps micro-batches, autocast/GradScaler, zero_grad(set_to_none)."""

    def __init__(self, workload: Workload, config: TrialConfig) -> None:
        self.workload, self.config = workload, config
        self.device = config.device
        torch.manual_seed(config.seed)
        self.model = workload.model()
        self.checkpointed: list[CheckpointedBlock] = []
        if config.activation_checkpointing:
            self.checkpointed = apply_checkpointing(self.model, workload.checkpoint_blocks)
            if not self.checkpointed:
                raise ValueError("activation checkpointing: no repeated blocks found (set Workload.checkpoint_blocks)")
        self.model.to(self.device)
        if config.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.optimizer = build_optimizer(workload, self.model, config.optimizer_impl)
        self.step_model: Any = self.model
        if config.compile is not None:
            self.step_model = torch.compile(self.model, mode=config.compile)
        self.scaler = torch.amp.GradScaler(self.device) if config.precision == "fp16" else None
        self.batches = endless_batches(workload, config)
        self.non_blocking = config.pin_memory and self.device == "cuda"

    def autocast(self) -> AbstractContextManager[Any]:
        if self.config.precision == "fp32":
            return nullcontext()
        return torch.autocast(device_type=self.device, dtype=_AMP_DTYPES[self.config.precision])

    def next_batch(self, timer: StepTimer | None) -> Any:
        with timer.data_wait() if timer is not None else nullcontext():
            batch = next(self.batches)
        return to_device(batch, self.device, non_blocking=self.non_blocking, channels_last=self.config.channels_last)

    def micro_loss(self, model: Any, batch: Any) -> torch.Tensor:
        with self.autocast():
            return self.workload.loss(model, batch)

    def __call__(self, timer: StepTimer | None = None, *, grad_norm: bool = False) -> tuple[torch.Tensor, float | None]:
        """Returns (mean loss as a device tensor, first-step grad norm when asked)."""
        accum = self.config.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for _ in range(accum):
            with torch.profiler.record_function("perfscope::data"):
                batch = self.next_batch(timer)
            loss = self.micro_loss(self.step_model, batch)
            scaled = loss / accum
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total += loss.detach().float()
        norm = None
        if grad_norm:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            grads = [p.grad.detach().float().norm() for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.stack(grads).norm()) if grads else 0.0
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total / accum, norm

    def count_flops(self) -> tuple[float, float, list[str]]:
        """(model FLOPs, hardware FLOPs, notes) per optimizer step, on the eager model: one micro-batch × accum.

        Counted on fake tensors (no device memory, no compute), so the count cannot OOM where the trial fit: the
        checkpointing pair runs twice the micro-batch that fit without checkpointing, and the count runs its
        blocks un-checkpointed (to measure the recompute for HFU). Where fake tensors fail, one real step at a
        small micro-batch, scaled linearly: matmul, conv and attention FLOPs are proportional to the batch.
        """
        micro, accum = self.config.micro_batch_size, self.config.grad_accum_steps

        def around(counter: StepFlopCounter) -> AbstractContextManager[None]:
            return counting_recompute(self.checkpointed, counter.running_total)

        def on_device(batch: Any) -> Any:
            return to_device(batch, self.device, non_blocking=False, channels_last=self.config.channels_last)

        try:
            counter = count_step_on_fake_tensors(self.model, next(self.batches), self.micro_loss, around=around, prepare=on_device)
            scale = 1.0
            method = f"FLOPs counted on fake tensors (FakeTensorMode: shapes only, no memory or compute) at micro-batch {micro}"
        except Exception as exc:  # noqa: BLE001 - an op without a fake kernel, a data-dependent shape, ...
            small = min(micro, FALLBACK_COUNT_MICRO_BATCH)
            loader_config = self.config.replace(micro_batch_size=small, num_workers=0, persistent_workers=False,
                                                prefetch_factor=None, pin_memory=False)
            batch = on_device(next(endless_batches(self.workload, loader_config)))
            counter = count_step(self.model, batch, self.micro_loss, around=around)
            self.optimizer.zero_grad(set_to_none=True)
            scale = micro / small
            first_line = str(exc).splitlines()[0][:160] if str(exc) else ""
            why = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
            method = (f"fake-tensor FLOP counting failed ({why}): counted one real micro-step at micro-batch {small} "
                      f"and scaled ×{scale:g} to micro-batch {micro} (matmul/conv/attention FLOPs are linear in the batch)")
        model_flops = counter.total * scale * accum
        hardware_flops = (counter.total + recompute_flops(self.checkpointed)) * scale * accum
        notes = [method, *counter.notes]
        if self.checkpointed:
            notes.append(f"activation checkpointing of {len(self.checkpointed)} blocks: their forward is recomputed (HFU > MFU)")
        return model_flops, hardware_flops, notes


@contextmanager
def _gc_mode(mode: str) -> Iterator[None]:
    """GC pauses land in random steps: 'freeze' moves warm-up objects out of GC's reach, 'disable' stops it."""
    if mode == "disable":
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
    else:
        if mode == "freeze":
            gc.collect()
            gc.freeze()
        yield


def run_trial(workload: Workload, config: TrialConfig, artifacts_dir: Path | None = None) -> TrialMetrics:
    """Measure one configuration; see the module docstring for the order of work."""
    device = config.device
    step = TrainStep(workload, config)
    # After the user's file, workload() and model() ran, so tf32=None keeps (and records) their own setting.
    matmul_tf32 = apply_matmul_tf32(config.tf32)
    unavailable: dict[str, str] = {}

    first_step_s = None
    first_grad_norm = None
    for i in range(config.warmup_steps):
        synchronize(device)
        start = time.perf_counter()
        _, norm = step(grad_norm=i == 0)
        synchronize(device)
        if i == 0:
            first_step_s, first_grad_norm = time.perf_counter() - start, norm

    memory.reset_peak(device)
    timer = StepTimer(device)
    losses: list[torch.Tensor] = []
    sampler = UtilizationSampler(device=device) if config.sample_utilization else None
    with _gc_mode(config.gc_mode), sampler if sampler is not None else nullcontext():
        timer.start()
        for i in range(config.steps):
            loss, norm = step(timer, grad_norm=first_grad_norm is None and i == 0)
            if norm is not None:
                first_grad_norm = norm
            losses.append(loss)
            timer.step_end()
        step_times, data_waits = timer.finish()
    peak_allocated, peak_reserved = memory.device_peaks(device)
    loss_values = [float(v) for v in torch.stack(losses).cpu()]

    summary = summarize(step_times)
    samples_per_step = config.samples_per_step
    metrics = TrialMetrics(
        steps=config.steps,
        warmup_steps=config.warmup_steps,
        micro_batch_size=config.micro_batch_size,
        grad_accum_steps=config.grad_accum_steps,
        samples_per_step=samples_per_step,
        step_times_s=step_times,
        data_wait_s=data_waits,
        step_time_s=summary,
        data_wait_fraction=min(1.0, sum(data_waits) / sum(step_times)) if sum(step_times) > 0 else 0.0,
        samples_per_s=samples_per_step / summary.median,
        losses=loss_values,
        first_grad_norm=first_grad_norm,
        first_step_s=first_step_s,
        flop_convention=FLOP_CONVENTION,
        host_rss_peak_bytes=memory.process_peak_rss_bytes(),
        utilization=sampler.result() if sampler is not None else None,
        unavailable=unavailable,
    )
    metrics.matmul_tf32 = matmul_tf32
    if matmul_tf32 is None:
        unavailable["matmul_tf32"] = matmul_tf32_state().reason or "unknown"
    if workload.tokens_per_sample:
        metrics.tokens_per_s = metrics.samples_per_s * workload.tokens_per_sample
    if config.compile is not None and first_step_s is not None:
        metrics.compile_time_s = max(first_step_s - summary.median, 0.0)
    if device == "cuda":
        metrics.peak_memory_bytes, metrics.peak_reserved_bytes = peak_allocated, peak_reserved
        metrics.device_memory_capacity_bytes = int(torch.cuda.get_device_properties(0).total_memory)
    else:
        metrics.peak_memory_bytes = metrics.host_rss_peak_bytes
        unavailable["peak_memory_bytes"] = "CPU has no allocator peak: this is the trial process's peak host RSS"
        unavailable["peak_reserved_bytes"] = "CPU: no caching allocator"
    metrics.memory_breakdown = memory.breakdown(
        step.model, step.optimizer, peak_allocated if device == "cuda" else None, grads_present=False
    )
    if device != "cuda":
        unavailable["memory_breakdown.activations_and_temporaries"] = "needs the CUDA allocator peak"

    if config.count_flops:
        try:
            metrics.flops_per_step, metrics.hardware_flops_per_step, metrics.flop_notes = step.count_flops()
        except Exception as exc:  # noqa: BLE001 - a FLOP-count failure must not lose the timing
            unavailable["flops_per_step"] = f"FLOP counting failed: {type(exc).__name__}: {exc}"
    else:
        unavailable["flops_per_step"] = "FLOP counting disabled for this trial"
    if metrics.flops_per_step:
        metrics.achieved_tflops = metrics.flops_per_step / summary.median / 1e12

    if config.capture_trace and artifacts_dir is not None:
        _capture_trace(step, config, artifacts_dir, metrics)
    return metrics


def _capture_trace(step: TrainStep, config: TrialConfig, artifacts_dir: Path, metrics: TrialMetrics) -> None:
    """A short profiled window after the timed steps, so profiling overhead never touches the timings."""
    try:
        from perfscope.trace.alignment import benchmark_alignment
        from perfscope.trace.capture import TraceCapture
        from perfscope.trace.facts import trace_facts
    except ImportError as exc:
        metrics.unavailable["trace"] = f"trace capture not available: {exc}"
        return
    path = artifacts_dir / "trace.json.gz"
    with TraceCapture(path, device=config.device) as cap:
        for _ in range(cap.total_steps):
            step()
            cap.step()
    if cap.path is None:
        metrics.unavailable["trace"] = cap.note or "trace unavailable"
        return
    metrics.trace_path = str(cap.path)
    try:
        metrics.trace_facts = trace_facts(cap.path, device_type=config.device, steps=cap.active_steps)
    except Exception as exc:  # noqa: BLE001
        metrics.unavailable["trace_facts"] = f"trace analysis failed: {type(exc).__name__}: {exc}"
        return
    dtype = config.precision if config.precision != "fp32" else "fp32"
    metrics.trace_facts["gemm_alignment"] = benchmark_alignment(
        metrics.trace_facts.get("gemm_shapes", []), device=config.device, dtype=dtype
    )


def all_finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)

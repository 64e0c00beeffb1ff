"""A run's TrialMetrics from its RunObservation: the one builder for the trials and the hooks.

Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from perfscope.measure.flops import FLOP_CONVENTION
from perfscope.measure.observation import FirstStep, FlopCount, RunObservation, Unavailable
from perfscope.measure.peaks import benchmark_alignment_for
from perfscope.measure.structure import fill_kernel_launches
from perfscope.measure.window import assemble_metrics
from perfscope.results import TrialMetrics
from perfscope.results.fingerprint import Fingerprint, MemoryPeak
from perfscope.results.messages import error, msg
from perfscope.trace.facts import trace_facts

MEMORY_PEAK_TOLERANCE = 0.02
"""The CUDA allocator peak of identical code moves a little (cuBLAS workspaces, allocator rounding): 2%."""

CPU_PEAK_IS_RSS = msg("cpu_peak_is_rss")


def build_trial_metrics(obs: RunObservation) -> TrialMetrics:
    """TrialMetrics of one run (MFU and the job's figures are applied later, against the run's peak)."""
    metrics = assemble_metrics(
        obs.windows, obs.records, micro_batch_size=obs.micro_batch_size, grad_accum_steps=obs.grad_accum_steps,
        warmup_steps=obs.warmup_steps, samples_per_step=obs.samples_per_step, tokens_per_sample=obs.tokens_per_sample,
        step_times_sampled=obs.step_times_sampled,
    )
    unavailable = metrics.unavailable
    metrics.host_rss_peak_bytes = obs.memory.host_rss
    metrics.utilization = obs.utilization
    metrics.calibration = obs.calibration
    metrics.first_grad_norm = obs.first_grad_norm
    metrics.optimizer = obs.optimizer
    if obs.excluded_s:
        metrics.excluded_s = dict(obs.excluded_s)
    if isinstance(obs.losses, Unavailable):
        unavailable["losses"] = obs.losses.reason
    elif obs.losses is not None:
        metrics.losses = list(obs.losses)
        if obs.losses_before_window is not None:
            metrics.losses_before_window = list(obs.losses_before_window)
    if obs.data_wait is not None:
        unavailable["data_wait_share"] = obs.data_wait.reason
    _first_step(metrics, obs)
    if obs.recompiles_in_window is not None:
        metrics.recompiles_in_window = obs.recompiles_in_window
        if obs.recompiles_in_window:
            metrics.flags.append(msg("recompiled_in_window", times=obs.recompiles_in_window))
    if isinstance(obs.matmul_tf32, Unavailable):
        unavailable["matmul_tf32"] = obs.matmul_tf32.reason
    else:
        metrics.matmul_tf32 = obs.matmul_tf32
    _memory(metrics, obs)
    _flops(metrics, obs.flops)
    _fingerprint(metrics, obs)
    return metrics


def _first_step(metrics: TrialMetrics, obs: RunObservation) -> None:
    first = obs.first_step
    if isinstance(first, Unavailable):
        metrics.unavailable["first_step_s"] = first.reason
    elif isinstance(first, FirstStep):
        metrics.first_step_s = first.seconds
        if first.compiled and metrics.steps:
            metrics.compile_time_s = max(first.seconds - metrics.mean_step_time_s, 0.0)


def _memory(metrics: TrialMetrics, obs: RunObservation) -> None:
    peaks = obs.memory
    if peaks.on_device:
        metrics.peak_memory_bytes, metrics.peak_reserved_bytes = peaks.allocated, peaks.reserved
        metrics.device_memory_capacity_bytes = peaks.capacity
    else:
        metrics.peak_memory_bytes = peaks.host_rss
        metrics.unavailable["peak_memory_bytes"] = CPU_PEAK_IS_RSS
        metrics.unavailable["peak_reserved_bytes"] = msg("cpu_no_reserved")
    owners = obs.owners
    if isinstance(owners, Unavailable):
        metrics.unavailable["memory_breakdown"] = owners.reason
        return
    rest = None
    if peaks.on_device:
        assert peaks.allocated is not None
        rest = max(peaks.allocated - owners.parameters - owners.gradients - owners.optimizer_state, 0)
    else:
        metrics.unavailable["memory_breakdown.activations_and_temporaries"] = msg("activations_need_peak")
    metrics.memory_breakdown = dataclasses.replace(owners, activations_and_temporaries=rest)


def _flops(metrics: TrialMetrics, flops: FlopCount | Unavailable) -> None:
    metrics.flop_convention = flops.convention if isinstance(flops, FlopCount) else FLOP_CONVENTION
    if isinstance(flops, Unavailable):
        metrics.unavailable["flops_per_step"] = flops.reason
        return
    metrics.flops_per_step = flops.model
    metrics.hardware_flops_per_step = flops.hardware
    metrics.flop_notes = list(flops.notes)


def _fingerprint(metrics: TrialMetrics, obs: RunObservation) -> None:
    """The counted structure, with the run's allocator peak (the one field that carries a tolerance)."""
    if isinstance(obs.fingerprint, Unavailable):
        metrics.unavailable["fingerprint"] = obs.fingerprint.reason
        return
    fingerprint: Fingerprint = obs.fingerprint
    if obs.compile_facts is not None:
        fingerprint.compile = obs.compile_facts
    peaks = obs.memory
    if peaks.on_device and peaks.allocated:
        fingerprint.memory = MemoryPeak(bytes=int(peaks.allocated), tolerance=MEMORY_PEAK_TOLERANCE,
                                        source=f"torch.cuda.max_memory_allocated {peaks.scope}")
    else:
        fingerprint.unavailable["memory"] = msg("cpu_no_fingerprint_memory")
    if fingerprint.kernel_launches is None:
        fingerprint.unavailable.setdefault("kernel_launches", msg("kernel_launches_from_trace"))
    if isinstance(obs.window_syncs, Unavailable):
        fingerprint.unavailable["window_syncs"] = obs.window_syncs.reason
    elif obs.window_syncs is not None:
        fingerprint.window_syncs = obs.window_syncs
    metrics.fingerprint = fingerprint


def attach_trace(metrics: TrialMetrics, trace: Path, *, device_type: str, steps: Any = None,
                 alignment_precision: str | None = None) -> None:
    """The trace's path and facts (with the fingerprint's kernel launches); a failed analysis costs the facts only.

    ``alignment_precision``: also benchmark the trace's GEMM shapes at that precision (the trials do, on their own
    device; the hooks leave the user's device alone)."""
    metrics.trace_path = str(trace)
    try:
        facts = trace_facts(trace, device_type=device_type, steps=steps)
        if alignment_precision is not None:
            facts.gemm_alignment = benchmark_alignment_for(facts.gemm_shapes, device=device_type,
                                                           precision=alignment_precision)
        metrics.trace_facts = facts
        if metrics.fingerprint is not None:
            fill_kernel_launches(metrics.fingerprint, facts)
    except Exception as exc:  # noqa: BLE001 - the trace is context; the measurement stands without it
        metrics.unavailable["trace_facts"] = msg("trace_analysis_failed", error=error(exc))

"""Assemble a run's metrics from its windows: one definition of throughput for analyze, hooks and check.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Sequence

from perfscope.measure.window import StepRecord
from perfscope.results.messages import Message, msg
from perfscope.results.model import TrialMetrics, Window
from perfscope.stats import summarize


def window_totals(windows: Sequence[Window]) -> tuple[int, int | None, float]:
    """(steps, samples or None when any window's samples are unknown, wall seconds)."""
    steps = sum(w.steps for w in windows)
    wall = sum(w.wall_s for w in windows)
    samples = None if any(w.samples is None for w in windows) else sum(w.samples or 0 for w in windows)
    return steps, samples, wall


def assemble_metrics(
    windows: Sequence[Window],
    records: Sequence[StepRecord],
    *,
    micro_batch_size: int,
    grad_accum_steps: int,
    warmup_steps: int,
    samples_per_step: int | None = None,
    tokens_per_sample: int | None = None,
    step_times_sampled: bool = False,
) -> TrialMetrics:
    """TrialMetrics with every rate from work / wall time; FLOPs, memory and MFU are filled in later."""
    steps, samples, wall = window_totals(windows)
    unavailable: dict[str, Message] = {}
    samples_per_s = samples / wall if samples is not None and wall > 0 else None
    if samples is None:
        unavailable["samples_per_s"] = msg("samples_per_step_unknown")
    elif wall <= 0:
        unavailable["samples_per_s"] = msg("no_timed_step")
    times = [r.time_s for r in records]
    metrics = TrialMetrics(
        steps=steps,
        warmup_steps=warmup_steps,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        samples_per_step=samples_per_step if samples_per_step is not None else micro_batch_size * grad_accum_steps,
        windows=list(windows),
        samples_per_s=samples_per_s,
        wall_s=wall,
        data_wait_share=min(1.0, sum(w.data_wait_s for w in windows) / wall) if wall > 0 else 0.0,
        host_data_wait_share=min(1.0, sum(w.host_data_wait_s for w in windows) / wall) if wall > 0 else 0.0,
        step_times_s=times,
        step_data_wait_s=[r.data_wait_s for r in records],
        step_times_sampled=step_times_sampled,
        typical_step=summarize(times) if times else None,
        unavailable=unavailable,
    )
    if tokens_per_sample and samples_per_s is not None:
        metrics.tokens_per_s = samples_per_s * tokens_per_sample
    return metrics

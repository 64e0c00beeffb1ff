"""Builders of small, realistic Results objects for tests of the stages after measurement."""

from __future__ import annotations

import random

from perfscope.results import (
    Environment,
    Peak,
    Results,
    Trial,
    TrialMetrics,
    Utilization,
    WorkloadInfo,
)
from perfscope.stats import summarize


def make_environment(device_type: str = "cuda", device_name: str = "NVIDIA H100 80GB HBM3") -> Environment:
    return Environment(
        device_type=device_type,
        device_name=device_name,
        device_count=1 if device_type == "cuda" else 0,
        torch_version="2.13.0",
        python_version="3.11.7",
        cpu_model="Test CPU",
        cpu_cores_logical=16,
    )


def make_step_times(median_s: float, n: int = 30, noise: float = 0.02, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median_s * (1 + rng.gauss(0, noise)) for _ in range(n)]


def make_trial(
    name: str = "baseline",
    *,
    median_s: float = 0.1,
    n: int = 30,
    noise: float = 0.02,
    seed: int = 0,
    flops_per_step: float = 4e13,
    peak_tflops: float = 989.4,
    batch: int = 8,
    data_wait_fraction: float = 0.0,
    status: str = "ok",
    knobs: list[str] | None = None,
) -> Trial:
    if status != "ok":
        return Trial(name=name, config={"micro_batch_size": batch}, status=status, error=f"{status} in test", knobs=knobs or [])
    times = make_step_times(median_s, n, noise, seed)
    summary = summarize(times)
    metrics = TrialMetrics(
        steps=n,
        warmup_steps=3,
        micro_batch_size=batch,
        grad_accum_steps=1,
        samples_per_step=batch,
        step_times_s=times,
        data_wait_s=[t * data_wait_fraction for t in times],
        step_time_s=summary,
        data_wait_fraction=data_wait_fraction,
        samples_per_s=batch / summary.median,
        flops_per_step=flops_per_step,
        hardware_flops_per_step=flops_per_step,
        achieved_tflops=flops_per_step / summary.median / 1e12,
        mfu=flops_per_step / summary.median / (peak_tflops * 1e12),
        hfu=flops_per_step / summary.median / (peak_tflops * 1e12),
        peak_memory_bytes=10 * 2**30,
        device_memory_capacity_bytes=80 * 2**30,
        utilization=Utilization(),
    )
    return Trial(name=name, config={"micro_batch_size": batch, "precision": "fp32"}, status="ok", metrics=metrics, knobs=knobs or [])


def make_results(trials: list[Trial] | None = None, *, device_type: str = "cuda") -> Results:
    return Results(
        perfscope_version="0.1.0",
        created_at="2026-11-22T00:00:00Z",
        command=["perfscope", "analyze", "examples/tiny_transformer.py"],
        environment=make_environment(device_type),
        workload=WorkloadInfo(path="examples/tiny_transformer.py", sha256="0" * 64, name="tiny_transformer"),
        peak=Peak(tflops=989.4, dtype="bf16", source="datasheet: NVIDIA H100 SXM (dense)"),
        trials=trials if trials is not None else [make_trial()],
    )

"""The results model: what one perfscope run measured, as typed dataclasses and a versioned JSON file.

    >>> from perfscope.results import Results
    >>> results = Results.load("perfscope-out/results.json")
    >>> [t.metrics.mfu for t in results.ok_trials()]

Every stage after measurement (rules, report, the CI gate) reads this model and nothing else, so a GPU
run's results can be re-rendered or gated on any machine. Rules of the format:
- ``schema_version`` bumps on any incompatible change; loading another version is an error, not a guess.
- No bare NaN/Infinity: a number the machine could not give is ``null`` and its reason is recorded in the
  owning object's ``unavailable`` map (metric name -> why).
- Files are written atomically (temp file + rename), so an interrupted run never leaves half a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfscope.errors import ResultsError
from perfscope.results.io import read_json, write_json
from perfscope.results.serde import from_jsonable, to_jsonable
from perfscope.stats import Summary

__all__ = [
    "FAILED_STATUSES", "SCHEMA_VERSION", "Environment", "Finding", "Gain", "KnobOutcome", "MemoryBreakdown",
    "MicroBatchPoint", "Peak", "Results", "Summary", "Sweep", "Trial", "TrialMetrics", "TrialStatus", "Utilization",
    "UtilizationSample", "WorkloadInfo",
]

SCHEMA_VERSION = 1

TrialStatus = Literal["ok", "oom", "error", "crashed", "timeout", "nonfinite", "skipped"]
FAILED_STATUSES: frozenset[str] = frozenset({"oom", "error", "crashed", "timeout", "nonfinite"})


# --------------------------------------------------------------------------------------------- model


@dataclass(kw_only=True)
class Peak:
    """A FLOP/s denominator and where it came from (never a silent default)."""

    tflops: float
    dtype: str
    source: str  # e.g. "datasheet: NVIDIA H100 SXM (dense) <url>", "measured matmul ceiling", "--peak-tflops"


@dataclass(kw_only=True)
class Environment:
    """The machine a run measured; the CI gate refuses to compare runs from different devices."""

    device_type: str  # "cpu" | "cuda"
    device_name: str  # the device the run used (device_index), not necessarily CUDA device 0
    device_count: int = 0
    device_index: int | None = None  # CUDA index of the device the run used
    device_uuid: str | None = None  # its UUID as NVML spells it ("GPU-..." / "MIG-..."): stable across CUDA_VISIBLE_DEVICES
    visible_devices: list[str] = field(default_factory=list)  # every CUDA-visible device, in CUDA order: "name (uuid)"
    multiprocessor_count: int | None = None  # SMs this process can use (a MIG slice has a fraction of the GPU's)
    mig: bool = False  # the device is a MIG slice: its datasheet peak is the full GPU's × its SM share
    compute_capability: str | None = None
    device_memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str = ""
    python_version: str = ""
    platform: str = ""
    cpu_model: str = ""
    cpu_cores_physical: int | None = None
    cpu_cores_logical: int | None = None
    host_memory_bytes: int | None = None
    hostname: str = ""
    datasheet_peaks_tflops: dict[str, float] = field(default_factory=dict)  # dtype -> dense TFLOP/s
    datasheet_source: str | None = None
    measured_ceiling_tflops: dict[str, float] = field(default_factory=dict)  # dtype -> measured matmul TFLOP/s
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class WorkloadInfo:
    """Identity of the user's workload: path and content hash let the CI gate spot a different workload."""

    path: str
    sha256: str
    name: str
    declared: dict[str, Any] = field(default_factory=dict)  # batch_size, tokens_per_sample, user's loop settings
    parameter_count: int | None = None


@dataclass(kw_only=True)
class MemoryBreakdown:
    """Bytes by owner at the step's peak: weights + grads + optimizer state + the rest (activations, temporaries)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations_and_temporaries: int | None


@dataclass(kw_only=True)
class UtilizationSample:
    t_s: float  # seconds since the measured region started
    gpu_util_percent: float | None = None
    gpu_memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    cpu_percent: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Utilization:
    """Device (NVML) and host (psutil) load during the measured steps."""

    gpu_util_percent: Summary | None = None
    power_w: Summary | None = None
    sm_clock_mhz: Summary | None = None
    sm_clock_max_mhz: float | None = None  # the device's maximum SM clock (NVML), to judge how far clocks dropped
    gpu_memory_used_bytes_max: int | None = None
    cpu_percent: Summary | None = None  # whole-host CPU utilization, 0..100
    throttle_reasons_seen: list[str] = field(default_factory=list)
    samples: list[UtilizationSample] = field(default_factory=list)  # bounded timeline for charts
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class TrialMetrics:
    """What one configuration measured. Per-step samples are kept: the gate and the sweep test on them."""

    steps: int
    warmup_steps: int
    micro_batch_size: int
    grad_accum_steps: int
    samples_per_step: int  # global batch on this rank: micro x accumulation
    step_times_s: list[float]
    data_wait_s: list[float]  # host time blocked on the data iterator, per step
    step_time_s: Summary
    data_wait_fraction: float
    samples_per_s: float
    tokens_per_s: float | None = None
    losses: list[float | None] = field(default_factory=list)  # per measured step; None = non-finite
    first_grad_norm: float | None = None
    flops_per_step: float | None = None  # model FLOPs (forward + backward), no recompute
    hardware_flops_per_step: float | None = None  # adds activation-checkpointing recompute
    flop_convention: str = ""
    flop_notes: list[str] = field(default_factory=list)  # gaps detected and filled/flagged
    achieved_tflops: float | None = None
    mfu: float | None = None  # model FLOPs / step time / Results.peak (the fixed ranking denominator)
    hfu: float | None = None
    mfu_vs_measured_ceiling: float | None = None
    peak_memory_bytes: int | None = None  # CUDA max allocated; on CPU, peak host RSS of the trial process
    peak_reserved_bytes: int | None = None
    device_memory_capacity_bytes: int | None = None
    memory_breakdown: MemoryBreakdown | None = None
    host_rss_peak_bytes: int | None = None
    utilization: Utilization | None = None
    compile_time_s: float | None = None  # first-step time beyond a steady step, when compiling
    first_step_s: float | None = None
    matmul_tf32: bool | None = None  # TF32 for fp32 matmuls during the trial: the config's, else the user's own setting
    trace_path: str | None = None
    trace_facts: dict[str, Any] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Trial:
    """One configuration of the workload, run in its own process."""

    name: str
    config: dict[str, Any]  # a TrialConfig as a dict (kept loose so old files stay readable as knobs grow)
    status: TrialStatus
    knobs: list[str] = field(default_factory=list)  # ids of the knobs applied on top of the baseline
    error: str | None = None
    metrics: TrialMetrics | None = None
    wall_time_s: float | None = None
    started_at: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.metrics is not None


@dataclass(kw_only=True)
class Gain:
    """A measured speed-up: ratio of baseline to candidate median step time (>1 is faster), with its interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    significant: bool


@dataclass(kw_only=True)
class Finding:
    """One diagnosed bottleneck and its fix, as produced by a rule (rules never rank; the engine does)."""

    rule_id: str
    title: str
    severity: Literal["high", "medium", "low", "info"]
    evidence: list[str]
    fix: str  # the code change, diff-style where it applies
    gain: Gain | None = None  # measured
    estimated_gain: float | None = None  # estimated speed-up ratio, when not measured
    estimate_method: str | None = None
    caveats: list[str] = field(default_factory=list)  # semantics changes (numerics, global batch, LR)
    reference: str | None = None
    trial: str | None = None  # the trial that measured the gain


@dataclass(kw_only=True)
class KnobOutcome:
    """One knob tried alone on top of the baseline (or why it was not tried)."""

    knob: str  # stable knob id, e.g. "amp_bf16"
    title: str
    status: Literal["measured", "skipped", "inapplicable", "failed", "rejected"]
    reason: str | None = None  # why skipped / inapplicable / failed / rejected (e.g. numerics guard)
    trial: str | None = None
    gain: Gain | None = None
    mfu: float | None = None
    changes_semantics: list[str] = field(default_factory=list)  # e.g. "numerics: bf16 autocast"
    code_change: str | None = None


@dataclass(kw_only=True)
class MicroBatchPoint:
    """One point of the micro-batch search (throughput and memory vs micro-batch, OOMs included)."""

    micro_batch_size: int
    grad_accum_steps: int
    trial: str
    status: str
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = None


@dataclass(kw_only=True)
class Sweep:
    """The search: each knob alone, the stacked recommendation, and the micro-batch curve."""

    baseline_trial: str
    recommended_trial: str | None = None
    recommended_knobs: list[str] = field(default_factory=list)
    recommended_gain: Gain | None = None
    knobs: list[KnobOutcome] = field(default_factory=list)  # ranked: best measured gain first
    micro_batch: list[MicroBatchPoint] = field(default_factory=list)
    budget_s: float | None = None
    elapsed_s: float | None = None
    stopped_early: str | None = None  # e.g. "budget exhausted", "interrupted"
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Results:
    """A whole run: environment, workload, trials, and (when present) the sweep and the findings."""

    schema_version: int = SCHEMA_VERSION
    perfscope_version: str = ""
    created_at: str = ""
    source: Literal["analyze", "hooks"] = "analyze"
    command: list[str] = field(default_factory=list)  # argv that reproduces the run
    environment: Environment
    workload: WorkloadInfo
    peak: Peak | None = None  # fixed denominator for MFU across all trials
    trials: list[Trial] = field(default_factory=list)
    sweep: Sweep | None = None
    findings: list[Finding] | None = None
    notes: list[str] = field(default_factory=list)

    def trial(self, name: str) -> Trial | None:
        return next((t for t in self.trials if t.name == name), None)

    def ok_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.ok]

    def upsert(self, trial: Trial) -> None:
        """Replace the trial of the same name (a resumed or re-run trial) or append it."""
        self.trials = [t for t in self.trials if t.name != trial.name] + [trial]

    # ------------------------------------------------------------------------------------- files

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> Results:
        if not isinstance(data, dict):
            raise ResultsError("results must be a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ResultsError(
                f"results schema_version {version!r} is not supported (this perfscope reads {SCHEMA_VERSION})"
            )
        try:
            return from_jsonable(cls, data)
        except (TypeError, ValueError, KeyError) as exc:
            raise ResultsError(f"results do not match the schema: {exc}") from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Results:
        try:
            return cls.from_dict(read_json(path))
        except ResultsError as exc:
            raise ResultsError(f"{path}: {exc}") from None

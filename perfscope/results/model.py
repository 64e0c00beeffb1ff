"""The results model: what one perfscope run measured, as typed dataclasses and a versioned JSON file.

    >>> from perfscope.results import Results
    >>> results = Results.load("perfscope-out/results.json")
    >>> [t.metrics.mfu for t in results.ok_trials()]

Design notes: docs/results.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfscope.errors import ResultsError
from perfscope.results.config import TrialConfig
from perfscope.results.constraints import (
    FLOPS,
    FRACTION,
    NAME,
    NON_NEGATIVE,
    PEAK_TFLOPS,
    SECONDS,
    SERIES,
    SERIES_SECONDS,
    TFLOPS,
    show,
)
from perfscope.results.dataset_profile import DatasetProfile
from perfscope.results.distributed import DistributedFacts
from perfscope.results.fingerprint import Fingerprint
from perfscope.results.io import load_typed, write_json
from perfscope.results.layout import LayoutTable, ModelLayout
from perfscope.results.messages import Message
from perfscope.results.migrate import upgrade
from perfscope.results.serde import from_jsonable, to_jsonable
from perfscope.results.trace_facts import TraceFacts
from perfscope.results.verdicts import Finding, Gain, KnobOutcome, MicroBatchPoint, NumericsCheck, RunNoise, Sweep, Verdict
from perfscope.stats import Summary

__all__ = [
    "CONTENDED", "FAILED_STATUSES", "MEMORY_CATEGORY_NAMES", "SCHEMA_VERSION", "Contention", "Environment", "Finding", "Gain", "KnobOutcome",
    "MemoryBreakdown", "MemoryCategories", "MicroBatchPoint", "ModelFacts", "NumericsCheck", "Peak", "Results", "RunNoise", "Summary", "Sweep", "Trial", "TrialConfig",
    "TrialMetrics", "TrialStatus", "Utilization", "UtilizationSample", "Verdict", "Window", "WorkloadInfo",
]

SCHEMA_VERSION = 4

TrialStatus = Literal["ok", "oom", "error", "crashed", "timeout", "nonfinite", "skipped"]
FAILED_STATUSES: frozenset[str] = frozenset({"oom", "error", "crashed", "timeout", "nonfinite"})

CONTENDED: frozenset[str] = frozenset({"contended", "contended_v2"})
"""The codes of Trial.excluded that say other load spoiled the run (perfscope.trial.session: whether it was measured
again is in the parameters; "contended_v2": read from an older file's prose)."""


# --------------------------------------------------------------------------------------------- model


@dataclass(kw_only=True)
class Peak:
    """A FLOP/s denominator and where it came from (never a silent default)."""

    tflops: float = field(metadata=PEAK_TFLOPS)
    dtype: str = field(metadata=NAME)
    source: str  # e.g. "datasheet: NVIDIA H100 SXM (dense) <url>", "measured matmul ceiling", "--peak-tflops"


@dataclass(kw_only=True)
class Environment:
    """The machine a run measured; the CI gate refuses to compare runs from different devices."""

    device_type: str = field(metadata=NAME)  # "cpu" | "cuda"
    device_name: str = field(metadata=NAME)  # the device the run used (device_index), not necessarily CUDA device 0
    device_count: int = field(default=0, metadata=NON_NEGATIVE)
    device_index: int | None = field(default=None, metadata=NON_NEGATIVE)  # CUDA index of the device the run used
    device_uuid: str | None = None  # its UUID as NVML spells it ("GPU-..." / "MIG-..."): stable across CUDA_VISIBLE_DEVICES
    visible_devices: list[str] = field(default_factory=list)  # every CUDA-visible device, in CUDA order: "name (uuid)"
    multiprocessor_count: int | None = field(default=None, metadata=NON_NEGATIVE)  # SMs this process can use (a MIG slice has a fraction of the GPU's)
    mig: bool = False  # the device is a MIG slice: its datasheet peak is the full GPU's × its SM share
    compute_capability: str | None = None
    device_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str = ""
    python_version: str = ""
    platform: str = ""
    cpu_model: str | None = None  # None: unknown, the reason is in `unavailable`
    cpu_cores_physical: int | None = field(default=None, metadata=NON_NEGATIVE)
    cpu_cores_logical: int | None = field(default=None, metadata=NON_NEGATIVE)
    cpu_cores_usable: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Cores the run may use: min(physical cores, the affinity mask, the cgroup CPU quota) (perfscope.measure.cores).
    Bounds advice that needs spare cores, such as DataLoader workers; None in results recorded before it existed."""
    cpu_cores_usable_how: str = ""
    host_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    numa_nodes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """NUMA nodes with CPUs (perfscope.measure.environment.numa_nodes): above 1, where a rank runs relative to its
    GPU matters (torchrun --numa-binding). None with the reason in `unavailable` off Linux or when unreadable."""
    hostname: str = ""
    datasheet_peaks_tflops: dict[str, float] = field(default_factory=dict, metadata=TFLOPS)  # dtype -> dense TFLOP/s
    datasheet_source: str | None = None
    measured_ceiling_tflops: dict[str, float] = field(default_factory=dict, metadata=TFLOPS)  # dtype -> measured matmul TFLOP/s
    measured_ceiling_how: str = ""
    """Where the ceiling came from: "measured in this run", or when and where a cached reading of this machine was
    measured (perfscope.measure.ceiling_cache); "" in results recorded before it existed."""
    unavailable: dict[str, Message] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    """What the knobs need to know about the model; read in the probe process (the parent never builds it)."""

    parameter_count: int = field(metadata=NON_NEGATIVE)
    has_conv2d: bool
    repeated_blocks: int = field(metadata=NON_NEGATIVE)
    optimizer_class: str
    matmul_tf32: bool | None = None
    """The user's matmul TF32 setting once their file was imported and workload()/model() ran (None: unknown).
    The baseline leaves TF32 as the user set it (TrialConfig.tf32=None), so this is what it runs with."""
    layout: ModelLayout | None = None
    """How the model splits for tensor / pipeline parallelism (perfscope.results.layout)."""


@dataclass(kw_only=True)
class WorkloadInfo:
    """Identity of the user's workload: path and content hash let the CI gate spot a different workload."""

    path: str
    sha256: str
    name: str = field(metadata=NAME)
    declared: dict[str, Any] = field(default_factory=dict)  # batch_size, tokens_per_sample, user's loop settings
    parameter_count: int | None = field(default=None, metadata=NON_NEGATIVE)
    model: ModelFacts | None = None


@dataclass(kw_only=True)
class MemoryBreakdown:
    """Bytes by owner at the step's peak: weights + grads + optimizer state + the rest (activations, temporaries)."""

    parameters: int = field(metadata=NON_NEGATIVE)
    gradients: int = field(metadata=NON_NEGATIVE)
    optimizer_state: int = field(metadata=NON_NEGATIVE)
    activations_and_temporaries: int | None


MEMORY_CATEGORY_NAMES = {"parameter": "parameters", "gradient": "gradients", "optimizer_state": "optimizer state",
                         "activation": "activations", "input": "inputs", "temporary": "temporaries",
                         "autograd_detail": "autograd detail", "unknown": "untracked allocations"}
"""torch.profiler's memory categories (perfscope.trace.memory_categories counts them) and their words in rules
and charts."""


@dataclass(kw_only=True)
class MemoryCategories:
    """One profiled step's memory by what torch.profiler's memory profile says holds it (`MEMORY_CATEGORY_NAMES`):
    perfscope.trace.memory_categories."""

    device: str
    peak_bytes: int = field(metadata=NON_NEGATIVE)
    """The highest total of the profiled step's tensors (not the allocator's peak: no cache, no fragmentation)."""
    peak_category: str
    """The category holding the most bytes at that peak."""
    at_peak: dict[str, int] = field(default_factory=dict, metadata=NON_NEGATIVE)
    max_bytes: dict[str, int] = field(default_factory=dict, metadata=NON_NEGATIVE)
    """Each category's own maximum over the step (not at one instant: they need not add up)."""
    reclassified_bytes: int = field(default=0, metadata=NON_NEGATIVE)
    """Bytes torch named parameter / optimizer state that were born and freed in the step (booked temporary)."""

    def share(self, category: str) -> float | None:
        """``category``'s share of the peak; None when nothing was seen."""
        return self.at_peak.get(category, 0) / self.peak_bytes if self.peak_bytes else None


@dataclass(kw_only=True)
class UtilizationSample:
    t_s: float = field(metadata=SECONDS)  # seconds since the measured region started
    gpu_util_percent: float | None = field(default=None, metadata=NON_NEGATIVE)
    gpu_memory_used_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    power_w: float | None = field(default=None, metadata=NON_NEGATIVE)
    sm_clock_mhz: float | None = field(default=None, metadata=NON_NEGATIVE)
    cpu_percent: float | None = field(default=None, metadata=NON_NEGATIVE)
    throttle_reasons: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Utilization:
    """Device (NVML) and host (psutil) load during the measured steps."""

    gpu_util_percent: Summary | None = None
    power_w: Summary | None = None
    sm_clock_mhz: Summary | None = None
    sm_clock_max_mhz: float | None = field(default=None, metadata=NON_NEGATIVE)  # the device's maximum SM clock (NVML), to judge how far clocks dropped
    gpu_memory_used_bytes_max: int | None = field(default=None, metadata=NON_NEGATIVE)
    cpu_percent: Summary | None = None  # whole-host CPU utilization, 0..100
    throttle_reasons_seen: list[str] = field(default_factory=list)
    samples: list[UtilizationSample] = field(default_factory=list, metadata=SERIES)  # bounded timeline for charts
    unavailable: dict[str, Message] = field(default_factory=dict)


@dataclass(kw_only=True)
class Contention:
    """What the rest of the machine did while a window was measured (perfscope.measure.contention)."""

    other_cpu_cores: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Average CPU cores used by processes other than the trial and its children (DataLoader workers), on the
    CPUs the trial may run on."""
    own_cpu_cores: float | None = None
    sweep_cpu_cores: float | None = field(default=None, metadata=NON_NEGATIVE)
    """A parallel sweep's own other processes (its driver, a local Ray's daemons) that could run on those CPUs:
    not counted in ``other_cpu_cores`` (perfscope.measure.contention); None outside a parallel sweep."""
    usable_cores: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Cores the trial may use (affinity CPUs capped by the cgroup quota): what the neighbour was judged against."""
    min_other_cores: float | None = field(default=None, metadata=NON_NEGATIVE)
    """The neighbour load from which the window counted as contended (threshold + CPUs beyond the quota)."""
    steal_cores: float | None = None
    """Average cores the hypervisor took away (virtual machines)."""
    device_other_processes: list[str] = field(default_factory=list)
    """Other processes on the same GPU, as NVML lists them (pids)."""
    contended: bool = False
    reason: Message | None = None
    """Why the window counts as contended (code "contention", its parts as messages)."""


@dataclass(kw_only=True)
class Window:
    """Contiguous timed optimizer steps in one process: every throughput is its work / ``wall_s``, never a median
    step's (the tail a median hides is what a profiler counts: docs/measurement.md)."""

    steps: int = field(metadata=NON_NEGATIVE)
    samples: int | None = field(metadata=NON_NEGATIVE)
    """Samples processed in the window (None: unknown, e.g. hooks that could not see the batches)."""
    wall_s: float = field(metadata=SECONDS)
    """First to last step boundary: device-timeline time on CUDA (idle gaps included), host clock on CPU."""
    data_wait_s: float = field(default=0.0, metadata=SECONDS)
    """Exposed data wait: the device idle while the host was blocked on the data iterator (docs/measurement.md)."""
    host_data_wait_s: float = field(default=0.0, metadata=SECONDS)
    """Host time blocked on the data iterator (exposed or hidden)."""
    contention: Contention | None = None


@dataclass(kw_only=True)
class TrialMetrics:
    """What one run (one process) of a configuration measured: the rates are work / wall time of the windows;
    ``step_times_s`` and ``typical_step`` describe a typical step and its tail, nothing more."""

    steps: int = field(metadata=NON_NEGATIVE)
    """Timed optimizer steps, all windows."""
    warmup_steps: int = field(metadata=NON_NEGATIVE)
    micro_batch_size: int = field(metadata=NON_NEGATIVE)
    grad_accum_steps: int = field(metadata=NON_NEGATIVE)
    samples_per_step: int = field(metadata=NON_NEGATIVE)
    """Global batch on this rank: micro-batch × accumulation."""
    windows: list[Window] = field(metadata=SERIES)
    samples_per_s: float | None = field(metadata=NON_NEGATIVE)
    """Samples in the windows / their wall time: THE throughput of this run."""
    wall_s: float = field(metadata=SECONDS)
    """Total wall time of the windows."""
    data_wait_share: float = field(metadata=FRACTION)
    """Exposed data wait / wall time (see Window.data_wait_s)."""
    host_data_wait_share: float = field(metadata=FRACTION)
    """Host time blocked on data / wall time (includes waits hidden behind queued GPU work)."""
    step_times_s: list[float] = field(default_factory=list, metadata=SERIES_SECONDS)
    """Per-step times in step order (hooks: a uniform sample of them, see ``step_times_sampled``)."""
    step_data_wait_s: list[float] = field(default_factory=list, metadata=SERIES_SECONDS)
    """Exposed data wait per step, aligned with ``step_times_s``."""
    step_gc_pause_s: list[float] = field(default_factory=list, metadata=SERIES_SECONDS)
    """Python garbage-collector pauses per step, aligned with ``step_times_s`` (empty: not measured)."""
    gc_collections: int | None = field(default=None, metadata=NON_NEGATIVE)
    gc_pause_s: float | None = field(default=None, metadata=SECONDS)
    """Collections in the window and their total pause (None: not measured, e.g. hooks or older results)."""
    step_times_sampled: bool = False
    typical_step: Summary | None = None
    """Median and percentiles of the per-step times: a description of a typical step, never the throughput."""
    tokens_per_s: float | None = field(default=None, metadata=NON_NEGATIVE)
    losses: list[float | None] = field(default_factory=list, metadata=SERIES)
    """Loss per measured step (None = non-finite); read after the window, never inside it."""
    losses_before_window: list[float | None] | None = field(default=None, metadata=SERIES)
    """Loss of every untimed step before the window (warm-up, prefetch drain): ``losses[0]`` is global step
    ``len(losses_before_window)``, so the numerics guard compares the same global step (docs/sweep.md)."""
    first_grad_norm: float | None = field(default=None, metadata=NON_NEGATIVE)
    optimizer: str | None = None
    """The optimizer class the trial stepped, module-qualified ("torch.optim._adafactor.Adafactor"): what a knob
    that replaces the user's optimizer really ran."""
    flops_per_step: float | None = field(default=None, metadata=FLOPS)
    """Model FLOPs per optimizer step (forward + backward), no recompute."""
    hardware_flops_per_step: float | None = field(default=None, metadata=FLOPS)
    """Adds activation-checkpointing recompute (HFU ≥ MFU)."""
    flop_convention: str = ""
    flop_notes: list[Message] = field(default_factory=list)
    achieved_tflops: float | None = field(default=None, metadata=TFLOPS)
    """Model FLOPs in the windows / their wall time / 1e12."""
    mfu: float | None = field(default=None, metadata=NON_NEGATIVE)
    """achieved model FLOP/s / Results.peak (one fixed denominator per run)."""
    hfu: float | None = field(default=None, metadata=NON_NEGATIVE)
    mfu_vs_measured_ceiling: float | None = field(default=None, metadata=NON_NEGATIVE)
    peak_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """CUDA: the caching allocator's max allocated. CPU: peak host RSS of the trial process (labelled so)."""
    peak_reserved_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    device_memory_capacity_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    memory_breakdown: MemoryBreakdown | None = None
    memory_categories: MemoryCategories | None = None
    """A profiled step's memory by category at its peak (taken after the trace window, traced runs only); None when
    not profiled, and in results written before it existed."""
    host_rss_peak_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    utilization: Utilization | None = None
    compile_time_s: float | None = field(default=None, metadata=SECONDS)
    """First-step time beyond a steady step, when compiling."""
    first_step_s: float | None = field(default=None, metadata=SECONDS)
    calibration: str | None = None
    """How the window's length was chosen (steps asked for, or calibrated to a minimum duration)."""
    recompiles_in_window: int | None = field(default=None, metadata=NON_NEGATIVE)
    """torch.compile recompilations (or CUDA-graph re-recordings) that happened inside the timed window."""
    excluded_s: dict[str, float] = field(default_factory=dict, metadata=SECONDS)
    """Wall time kept out of the windows, by reason ("evaluation", "checkpoint saving", ...): the hooks' pauses,
    reported apart so they are neither a training step's time nor lost."""
    matmul_tf32: bool | None = None
    """TF32 for fp32 matmuls during the trial: the config's, else the user's own setting."""
    trace_path: str | None = None
    trace_facts: TraceFacts | None = None
    """What the profiled window showed (perfscope.results.trace_facts); None when no trace was captured."""
    fingerprint: Fingerprint | None = None
    """The step's structure, counted (perfscope.results.fingerprint): what `perfscope check` diffs exactly."""
    dataset_profile: DatasetProfile | None = None
    """Where the user's Dataset spends its time (perfscope.results.dataset_profile); None unless the step waited for data."""
    distributed: DistributedFacts | None = None
    """A data-parallel run's ranks, communication and stragglers (perfscope.results.distributed); the fields above
    are the job's: all ranks' samples over the slowest rank's window, the rest rank 0's."""
    not_applied: dict[str, Message] = field(default_factory=dict)
    """Settings of the config this run did not actually run with (TrialConfig field -> why): a knob whose own
    setting is here was not measured (docs/sweep.md, "Honest statuses")."""
    flags: list[Message] = field(default_factory=list)
    """Figures that cannot be true as measured (e.g. MFU above 100%), with why; the report shows them."""
    unavailable: dict[str, Message] = field(default_factory=dict)

    @property
    def mean_step_time_s(self) -> float:
        """Wall time per timed step (wall / steps): the step time throughput corresponds to."""
        return self.wall_s / self.steps if self.steps else float("nan")

    @property
    def contention(self) -> list[Message]:
        """Why windows of this run were contended (empty when none was)."""
        return [w.contention.reason for w in self.windows if w.contention and w.contention.contended and w.contention.reason]


@dataclass(kw_only=True)
class Trial:
    """One run: one configuration measured in one fresh process, the unit of evidence for every comparison."""

    name: str = field(metadata=NAME)
    """Unique in the results: the configuration's name, with -r2, -r3 ... for its repeats."""
    configuration: str = field(default="", metadata=NAME)
    """Name of the configuration this run measures ("baseline", "amp_bf16", "recommended", ...)."""
    repeat: int = field(default=1, metadata=NON_NEGATIVE)
    sequence: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Position in the run's measurement order (interleaving pairs each run with its neighbours in time)."""
    config: TrialConfig
    unknown_settings: list[str] = field(default_factory=list)
    """TrialConfig fields that describe nothing observed (hooks cannot see every setting of a loop)."""
    status: TrialStatus
    knobs: list[str] = field(default_factory=list)
    """Ids of the knobs applied on top of the baseline."""
    error: str | None = None
    metrics: TrialMetrics | None = None
    excluded: Message | None = None
    """Why this run is not used as evidence (contended, a discarded warm-up); it stays in the file for the record."""
    wall_time_s: float | None = field(default=None, metadata=SECONDS)
    started_at: str | None = None
    numerics: NumericsCheck | None = None
    """The numerics guard's comparison of this run with the baseline's (the run the sweep judged a configuration
    by); None for runs it did not judge."""
    lane: int | None = field(default=None, metadata=NON_NEGATIVE)
    """The lane it ran on in a parallel sweep (perfscope.lanes): it is compared only with its lane's reference runs."""

    def __post_init__(self) -> None:
        if not self.configuration:
            self.configuration = self.name

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.metrics is not None

    @property
    def evidence(self) -> bool:
        """A successful run that counts as evidence (not excluded)."""
        return self.ok and self.excluded is None

    @property
    def contended(self) -> bool:
        """Excluded because other load on the machine spoiled its measurement."""
        return self.excluded is not None and self.excluded.code in CONTENDED


@dataclass(kw_only=True)
class Results:
    """A whole run: environment, workload, trials, and (when present) the sweep and the findings."""

    schema_version: int = SCHEMA_VERSION
    perfscope_version: str = ""
    created_at: str = ""
    source: Literal["analyze", "hooks", "trace"] = "analyze"
    """How the figures were obtained: trials `analyze` ran, the hooks in the user's loop, or a trace the user brought
    (`perfscope trace`: nothing was run, every figure is read from the trace and every finding is an estimate)."""
    command: list[str] = field(default_factory=list)  # argv that reproduces the run
    environment: Environment
    workload: WorkloadInfo
    peak: Peak | None = None  # fixed denominator for MFU across all trials
    trials: list[Trial] = field(default_factory=list)
    sweep: Sweep | None = None
    findings: list[Finding] | None = None
    layouts: LayoutTable | None = None
    """The (dp, tp, pp) layout search (perfscope.search.layout), when the run had more than one rank."""
    warnings: list[Message] = field(default_factory=list)
    """Measurement problems a reader must see first (persistent contention, implausible figures)."""
    notes: list[Message] = field(default_factory=list)

    def trial(self, name: str) -> Trial | None:
        return next((t for t in self.trials if t.name == name), None)

    def ok_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.ok]

    def runs(self, configuration: str) -> list[Trial]:
        """The evidence runs of one configuration, in measurement order."""
        runs = [t for t in self.trials if t.configuration == configuration and t.evidence]
        return sorted(runs, key=lambda t: (t.sequence is None, t.sequence or 0))

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
        """The typed model from parsed JSON: every value checked (constraints.py), errors naming the JSON path."""
        if not isinstance(data, dict):
            raise ResultsError("results must be a JSON object")
        try:
            data = upgrade(data)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError, ZeroDivisionError) as exc:
            raise ResultsError(f"a schema-{show(data.get('schema_version'))} file that cannot be upgraded: {type(exc).__name__}: {exc}") from None
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ResultsError(
                f"results schema_version {show(version)} is not supported (this perfscope reads {SCHEMA_VERSION})"
            )
        return from_jsonable(cls, data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Results:
        """Read, check and type a results file; any problem with the file is a ResultsError (exit 2) naming it."""
        return load_typed(path, cls.from_dict)

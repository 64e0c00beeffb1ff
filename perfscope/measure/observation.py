"""What one run observed, raw: the one input from which its TrialMetrics are built (perfscope.measure.build).

Design notes: docs/measurement.md."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.measure.flops import FLOP_CONVENTION
from perfscope.measure.window import StepRecord
from perfscope.results import MemoryBreakdown, Utilization, Window
from perfscope.results.fingerprint import CompileFacts, Fingerprint, WindowSyncs
from perfscope.results.messages import Message


@dataclass(frozen=True)
class Unavailable:
    """A value the run could not observe, and why (it becomes ``TrialMetrics.unavailable[name]``)."""

    reason: Message


@dataclass(frozen=True, kw_only=True)
class MemoryPeaks:
    """Device memory peaks, the span they cover, and the process's peak RSS (the CPU's only figure)."""

    device_type: str
    allocated: int | None = None
    """CUDA: torch.cuda.max_memory_allocated; None on CPU (no allocator peak)."""
    reserved: int | None = None
    capacity: int | None = None
    scope: str = "over the timed window"
    """The span the CUDA peaks cover: a trial resets them before its window, the hooks never reset the user's."""
    host_rss: int | None = None

    @property
    def on_device(self) -> bool:
        return self.device_type == "cuda" and self.allocated is not None


@dataclass(frozen=True, kw_only=True)
class FlopCount:
    """FLOPs of one optimizer step: model FLOPs (MFU) and, where known, those the hardware ran (HFU)."""

    model: float
    hardware: float | None = None
    notes: list[Message] = field(default_factory=list)
    convention: str = FLOP_CONVENTION


@dataclass(frozen=True, kw_only=True)
class FirstStep:
    """The first optimizer step's time; with torch.compile its excess over a steady step is the compile time."""

    seconds: float
    compiled: bool = False


@dataclass(kw_only=True)
class RunObservation:
    """Everything a run observed that its TrialMetrics are made of (docs/measurement.md)."""

    device_type: str
    windows: list[Window]
    records: list[StepRecord]
    """Per-step records kept (hooks: a uniform sample, then ``step_times_sampled``)."""
    micro_batch_size: int
    grad_accum_steps: int
    warmup_steps: int
    samples_per_step: int | None = None
    """None: micro-batch × accumulation (a trial's fixed batch)."""
    tokens_per_sample: int | None = None
    step_times_sampled: bool = False
    memory: MemoryPeaks
    owners: MemoryBreakdown | Unavailable
    """Parameters, gradients and optimizer state (perfscope.measure.memory.breakdown without a peak)."""
    flops: FlopCount | Unavailable
    fingerprint: Fingerprint | Unavailable
    """The structure counted on one step, before the run's memory peak and window facts are added."""
    compile_facts: CompileFacts | None = None
    window_syncs: WindowSyncs | Unavailable | None = None
    """Host syncs per step over the timed window (None: neither counted nor explained)."""
    first_step: FirstStep | Unavailable | None = None
    utilization: Utilization | None = None
    losses: list[float] | Unavailable | None = None
    losses_before_window: list[float] | None = None
    """The loss of every untimed step before the window (warm-up, prefetch drain), in order."""
    first_grad_norm: float | None = None
    optimizer: str | None = None
    calibration: str | None = None
    recompiles_in_window: int | None = None
    matmul_tf32: bool | Unavailable | None = None
    excluded_s: dict[str, float] = field(default_factory=dict)
    data_wait: Unavailable | None = None
    """Why the data wait was not measured (None: it was)."""

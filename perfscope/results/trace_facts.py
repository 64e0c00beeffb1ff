"""Typed trace facts: what one profiled window says about a trial, per profiled step.

    facts = trial.metrics.trace_facts             # TraceFacts, or None when no trace was captured
    facts.kernels.time_by_category.get("gemm")    # seconds per step
    facts.gpu.idle.data_wait_s if facts.gpu else None
    facts.launch.launch_bound, facts.sync.points_per_step, facts.gemm_shapes[0].time_s

Design notes: docs/results.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from perfscope.results.messages import Message

__all__ = [
    "GemmAlignment", "GemmShape", "GpuTimeline", "IdleBreakdown", "KernelFacts", "KernelStat", "LaunchFacts",
    "HostTransfers", "PageableCopies", "SyncFacts", "TraceFacts",
]


@dataclass(kw_only=True)
class KernelStat:
    """One kernel name (CUDA) or aten op (CPU), summed over its launches."""

    name: str
    time_s: float
    count: float
    """Launches per step (a mean over the profiled steps, so possibly fractional)."""
    category: str


@dataclass(kw_only=True)
class KernelFacts:
    """Where the device time goes, by category and by kernel (perfscope.trace.categories)."""

    source: Literal["kernels", "cpu ops"]
    """"kernels": device time of kernels, memcpys and memsets (CUDA); "cpu ops": aten op self time (CPU)."""
    time_by_category: dict[str, float] = field(default_factory=dict)
    """{"gemm", "conv", "attention", "elementwise", "normalization", "optimizer", "memcpy", "memset",
    "communication", "other": seconds per step}, largest first."""
    top: list[KernelStat] = field(default_factory=list)
    """At most 15, longest first."""
    fp32_gemm_fraction: float | None = None
    """Share of GEMM kernel time in kernels whose names say fp32 on CUDA cores (sgemm, f32 xmma, nvjet_sss);
    kernels whose names do not say (Triton templates) count as not fp32. None on CPU or without GEMMs."""


@dataclass(kw_only=True)
class IdleBreakdown:
    """What the GPU waited for while idle, seconds per step; the four add up to the idle time."""

    data_wait_s: float = 0.0
    """The host was inside a perfscope::data span (waiting on the data iterator)."""
    sync_s: float = 0.0
    """The host was blocked on the device (synchronize, .item(), a pageable copy) and the queue ran dry."""
    host_s: float = 0.0
    """The host was busy otherwise — dispatching and launching, Python: the launch-bound signature."""
    other_s: float = 0.0
    """The next work was already queued (a cross-stream dependency), or the trace does not link it."""

    @property
    def total_s(self) -> float:
        return self.data_wait_s + self.sync_s + self.host_s + self.other_s


@dataclass(kw_only=True)
class GpuTimeline:
    """The union of kernel, memcpy and memset intervals on every stream, within the profiled steps."""

    busy_fraction: float
    idle_fraction: float
    busy_s: float
    idle: IdleBreakdown


@dataclass(kw_only=True)
class SyncFacts:
    """Host waits on the device, read from the runtime calls that wait (cuda*Synchronize, blocking memcpy).

    `aten::item` alone is not one: on a host tensor (torch.optim's step counters) it waits for nothing."""

    points_per_step: float
    """Merged nests of waiting runtime calls per step."""
    events_per_step: dict[str, float] = field(default_factory=dict)
    """The waiting runtime calls by name, per step."""
    blocked_fraction: float = 0.0
    """Host time inside them (union of the spans) / step time."""
    sites: dict[str, float] = field(default_factory=dict)
    """Waits per step by call site: the ops around the call (`aten::to > aten::copy_ (HtoD copy)`,
    `aten::item > aten::_local_scalar_dense`), and the user's Python frame when the trace has stacks."""
    gpu_idle_after_s: float | None = None
    """GPU idle per step in the gaps that opened while the host waited: what the waits cost (the host work
    that follows a wait runs with an empty queue). None without a device timeline."""


@dataclass(kw_only=True)
class LaunchFacts:
    """Is the step bound by the host's kernel launches (CUDA) or op dispatch (CPU)?"""

    launch_bound: bool
    kernels_per_step: float
    """CUDA: compute kernels launched per step. CPU: aten ops per step."""
    median_kernel_us: float | None = None
    """CUDA: median kernel duration. CPU: median aten op self time."""
    host_launch_s: float | None = None
    """CUDA: host time in cudaLaunchKernel-like runtime/driver calls per step."""
    host_active_s: float | None = None
    """CUDA: host op time per step with the time blocked in syncs and data waits taken out."""
    starved_fraction: float | None = None
    """CUDA: GPU idle while the host was launching (IdleBreakdown.host_s) / step time."""
    tiny_op_time_fraction: float | None = None
    """CPU: share of aten op self time in ops under 20 µs."""
    launch_calls_per_step: dict[str, float] = field(default_factory=dict)
    """CUDA: host launch calls per step by runtime/driver API ("cudaLaunchKernel", "cuLaunchKernel",
    "cudaGraphLaunch": one per CUDA-graph replay, whatever the kernels the graph holds)."""
    starved_by: dict[str, float] = field(default_factory=dict)
    """CUDA: GPU idle per step waiting for the host, by the op that launched the work ending each gap (the
    longest five): many tiny launches, or one slow host op."""


@dataclass(kw_only=True)
class PageableCopies:
    """Host-to-device copies from pageable memory (staged by the driver, blocking the host), per step."""

    count: float
    bytes: float
    time_s: float


@dataclass(kw_only=True)
class HostTransfers:
    """Copies between host and device memory (over PCIe, or NVLink-C2C), pinned or pageable, per step."""

    h2d_bytes: float
    d2h_bytes: float
    time_s: float
    """Device time of the copies (their union: copies overlapping each other count once)."""
    overlapped_fraction: float | None
    """Share of the copy time during which a kernel ran: copies hidden behind compute. None without copies."""


@dataclass(kw_only=True)
class GemmShape:
    """A hot matmul from the recorded op shapes (aten::mm/addmm/bmm/baddbmm)."""

    op: str
    shape: list[int]
    """[m, k, n]."""
    dtype: str
    count: float
    """Calls per step."""
    time_s: float
    """Seconds per step, from ``time_source``."""
    time_source: str
    """"kernels": device time of the kernels the op launched (CUDA); "cpu op": the op's CPU time."""
    misaligned: list[str] = field(default_factory=list)
    """Dimensions ("m", "k", "n") not a multiple of 8 (16-bit dtypes) or 4 (fp32); 64 is better still."""


@dataclass(kw_only=True)
class GemmAlignment:
    """A misaligned GEMM timed on the device at its shape and padded to multiples of 64 (measure/peaks.py)."""

    shape: list[int]
    padded: list[int]
    dtype: str
    time_s: float
    padded_time_s: float
    speedup_per_flop: float


@dataclass(kw_only=True)
class TraceFacts:
    """One profiled window of a trial (perfscope.trace.facts.trace_facts)."""

    device_type: str
    steps: int
    """Profiled steps (ProfilerStep#N spans on the host)."""
    step_time_s: float
    """Mean wall time of a profiled step (profiling slows it a little: compare with the timed steps)."""
    kernels: KernelFacts
    launch: LaunchFacts
    sync: SyncFacts
    data_wait_fraction: float = 0.0
    """Host time inside perfscope::data spans / step time (on a GPU not all of it idles the device:
    see ``gpu.idle.data_wait_s``)."""
    gpu: GpuTimeline | None = None
    """None on CPU, or when a CUDA trace holds no device activity."""
    pageable_memcpy: PageableCopies | None = None
    host_transfers: HostTransfers | None = None
    """CUDA: every host↔device copy (what activation offloading adds); None on CPU."""
    gemm_shapes: list[GemmShape] = field(default_factory=list)
    """At most 20, longest first."""
    gemm_alignment: list[GemmAlignment] = field(default_factory=list)
    trace_bytes: int | None = None
    notes: list[Message] = field(default_factory=list)
    """What the reader should know about how these were derived (e.g. read from an older results file)."""


# ------------------------------------------------------------------------------ two runs' facts side by side
# A pure function of two typed facts, so the report's "Where the time went" reads it without the trace layer.

SCALARS: dict[str, Callable[[TraceFacts], float | None]] = {
    "step_time_s": lambda f: f.step_time_s,
    "gpu_idle_fraction": lambda f: f.gpu.idle_fraction if f.gpu else None,
    "kernel_count_per_step": lambda f: f.launch.kernels_per_step,
    "data_wait_fraction": lambda f: f.data_wait_fraction,
    "sync_fraction": lambda f: f.sync.blocked_fraction,
    "fp32_matmul_fraction": lambda f: f.kernels.fp32_gemm_fraction,
}
"""The scalar facts compared, by name: how each is read from one trace's facts (None: that trace lacks it)."""


@dataclass(frozen=True, kw_only=True)
class Change:
    """One figure in both traces."""

    baseline: float
    other: float

    @property
    def delta(self) -> float:
        """other − baseline."""
        return self.other - self.baseline


@dataclass(frozen=True, kw_only=True)
class TraceDiff:
    kernel_time_by_category: dict[str, Change]
    """Seconds per step by kernel category (perfscope.trace.categories), the largest in either trace first; a
    category one trace lacks counts 0 there."""
    scalars: dict[str, Change]
    """The SCALARS both traces have, by name."""


def diff_facts(baseline: TraceFacts, other: TraceFacts) -> TraceDiff:
    """Per-step seconds by kernel category and the scalar facts of two traces, with their deltas."""
    base_cats = baseline.kernels.time_by_category
    other_cats = other.kernels.time_by_category
    categories = sorted(set(base_cats) | set(other_cats), key=lambda c: -max(base_cats.get(c, 0.0), other_cats.get(c, 0.0)))
    scalars = {}
    for key, read in SCALARS.items():
        a, b = read(baseline), read(other)
        if a is not None and b is not None:
            scalars[key] = Change(baseline=a, other=b)
    return TraceDiff(
        kernel_time_by_category={c: Change(baseline=base_cats.get(c, 0.0), other=other_cats.get(c, 0.0)) for c in categories},
        scalars=scalars,
    )

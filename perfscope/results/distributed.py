"""What a data-parallel run measured beyond one process: every rank, the job, communication, stragglers, memory.

    facts = trial.metrics.distributed            # None for a single-process run
    facts.job_samples_per_s                      # all ranks' samples / the slowest rank's window
    [r.samples_per_s for r in facts.ranks]       # each rank's own throughput
    facts.stragglers                             # ranks slower than the others beyond their step-to-step noise

Design notes: docs/results.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from perfscope.results.constraints import FRACTION, NAME, NON_NEGATIVE, SECONDS, SERIES, SERIES_SECONDS
from perfscope.results.layout import ParallelFacts
from perfscope.results.messages import Message

DataParallel = Literal["none", "ddp", "fsdp", "zero1"]
"""How the harness wraps the model: not at all (one process, or the user's own wrapper), DistributedDataParallel,
FSDP2 (`fully_shard`), or DDP with ZeroRedundancyOptimizer (ZeRO-1: the optimizer state sharded)."""


@dataclass(kw_only=True)
class RankMetrics:
    """One rank's own view of the same measured steps."""

    rank: int = field(metadata=NON_NEGATIVE)
    local_rank: int = field(default=0, metadata=NON_NEGATIVE)
    node: str = ""
    """Host name of the rank's machine."""
    steps: int = field(default=0, metadata=NON_NEGATIVE)
    samples: int | None = field(default=None, metadata=NON_NEGATIVE)
    wall_s: float = field(default=0.0, metadata=SECONDS)
    samples_per_s: float | None = field(default=None, metadata=NON_NEGATIVE)
    step_times_s: list[float] = field(default_factory=list, metadata=SERIES_SECONDS)
    data_wait_share: float = field(default=0.0, metadata=FRACTION)
    local_step_times_s: list[float] = field(default_factory=list, metadata=SERIES_SECONDS)
    """Step times of a window run without gradient communication (DDP `no_sync` on every micro-batch, nothing
    else changed): the rank's own compute, which no peer can slow down. Empty when the strategy cannot run one."""
    gc_collections: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Python GC collections (all generations) during the measured window."""
    gc_pause_s: float | None = field(default=None, metadata=SECONDS)
    """Time inside those collections (gc.callbacks)."""
    other_cpu_cores: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Cores other processes used on the rank's machine during its window (perfscope.measure.contention)."""
    peak_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """CUDA: the allocator's peak; CPU: the rank process's peak RSS."""
    parameter_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Bytes of the parameters this rank holds (its shards under FSDP), counted from the tensors after a step."""
    gradient_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    optimizer_state_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    collective_s_per_step: float | None = field(default=None, metadata=SECONDS)
    """Time in collectives per step, from the rank's trace (a rank waiting for a slower peer waits in here)."""
    exposed_collective_s_per_step: float | None = field(default=None, metadata=SECONDS)
    """Collective time no compute overlapped (the step waited for the network or for a peer)."""
    unavailable: dict[str, Message] = field(default_factory=dict)

    @property
    def mean_step_time_s(self) -> float | None:
        return self.wall_s / self.steps if self.steps else None

    @property
    def mean_local_step_time_s(self) -> float | None:
        times = self.local_step_times_s
        return sum(times) / len(times) if times else None


@dataclass(kw_only=True)
class Straggler:
    """A rank whose own compute is slower than its peers' beyond the step-to-step noise."""

    rank: int = field(metadata=NON_NEGATIVE)
    slower_by: float = field(metadata=NON_NEGATIVE)
    """Its mean compute step over the median of the others' minus 1 (0.25 = 25% slower)."""
    slowest_share: float = field(metadata=FRACTION)
    """Share of the steps in which it was the slowest rank (1.0: every step; near 1/world size: chance)."""
    cause: Literal["data", "gc", "host contention", "compute", "unknown"] = "unknown"
    evidence: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class CollectiveStat:
    """One kind of collective in the traced steps, and the bus bandwidth it reached."""

    op: str = field(metadata=NAME)
    """"all_reduce", "all_gather", "reduce_scatter", "broadcast", ..."""
    calls_per_step: float = field(metadata=NON_NEGATIVE)
    time_s_per_step: float = field(metadata=SECONDS)
    bytes_per_step: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Payload bytes per step (what the strategy must move: gradients for DDP, shards for FSDP)."""
    bus_gbps: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Achieved bus bandwidth, GB/s: the NCCL-tests convention (all-reduce moves 2(n-1)/n of the payload per rank,
    all-gather and reduce-scatter (n-1)/n), so figures compare across world sizes."""
    microbench_bus_gbps: float | None = field(default=None, metadata=NON_NEGATIVE)
    """The same collective, same group, same payload size, alone (nothing to wait for): what the link can do."""
    microbench_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)


@dataclass(kw_only=True)
class CommunicationFacts:
    """Communication against compute in the traced steps of one rank (the job's slowest, unless noted)."""

    rank: int = field(metadata=NON_NEGATIVE)
    step_s: float = field(metadata=SECONDS)
    """Traced time per step."""
    compute_s: float = field(metadata=SECONDS)
    """Time per step some compute op or kernel ran (the union: overlapping work counted once)."""
    collective_s: float = field(metadata=SECONDS)
    exposed_collective_s: float = field(metadata=SECONDS)
    """Collective time per step with no compute running beside it: what faster communication would save."""
    overlap_share: float | None = field(default=None, metadata=FRACTION)
    """Share of the collective time hidden behind compute."""
    collectives: list[CollectiveStat] = field(default_factory=list)
    source: str = ""
    notes: list[Message] = field(default_factory=list)


@dataclass(kw_only=True)
class ShardingMemory:
    """Bytes per rank of the training state under one data-parallel strategy: the model, and the measurement."""

    strategy: str = field(metadata=NAME)
    """"DDP", "ZeRO-1 (ZeroRedundancyOptimizer)", "ZeRO-2 (FSDP2, no reshard after forward)", "ZeRO-3 (FSDP2, reshard
    after forward)" (perfscope.measure.memory)."""
    parameters: int = field(metadata=NON_NEGATIVE)
    gradients: int = field(metadata=NON_NEGATIVE)
    optimizer_state: int = field(metadata=NON_NEGATIVE)
    measured_total: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Parameters + gradients + optimizer state this rank held, counted from its tensors, when this strategy ran."""
    measured_by: str | None = None
    """The configuration that measured it."""

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state


@dataclass(kw_only=True)
class DistributedFacts:
    """A data-parallel run: the launch, every rank, and the job they make together."""

    world_size: int = field(metadata=NON_NEGATIVE)
    nnodes: int = field(default=1, metadata=NON_NEGATIVE)
    nproc_per_node: int = field(default=1, metadata=NON_NEGATIVE)
    backend: str = field(default="", metadata=NAME)
    """"gloo" | "nccl"."""
    data_parallel: str = field(default="ddp", metadata=NAME)
    """DataParallel: how the model was wrapped ("none": the user's own wrapper)."""
    global_batch: int | None = field(default=None, metadata=NON_NEGATIVE)
    """micro-batch × accumulation × data-parallel ranks."""
    job_samples_per_s: float | None = field(default=None, metadata=NON_NEGATIVE)
    """All ranks' samples / the slowest rank's window: the job's throughput."""
    slowest_rank: int | None = field(default=None, metadata=NON_NEGATIVE)
    ranks: list[RankMetrics] = field(default_factory=list, metadata=SERIES)
    stragglers: list[Straggler] = field(default_factory=list)
    straggler_method: str = ""
    communication: CommunicationFacts | None = None
    memory_model: list[ShardingMemory] = field(default_factory=list)
    numa_nodes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """NUMA nodes of the machine (rank 0's); > 1 is where binding ranks to their GPU's node matters."""
    numa_binding: str | None = None
    """torchrun --numa-binding as run, None when off."""
    parallel: ParallelFacts | None = None
    """Tensor / pipeline parallelism (perfscope.results.layout); None for a pure data-parallel run."""
    unavailable: dict[str, Message] = field(default_factory=dict)

    def rank(self, rank: int) -> RankMetrics | None:
        return next((r for r in self.ranks if r.rank == rank), None)


__all__ = ["CollectiveStat", "CommunicationFacts", "DataParallel", "DistributedFacts", "RankMetrics", "ShardingMemory",
           "Straggler"]


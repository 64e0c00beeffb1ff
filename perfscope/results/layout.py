"""Model-parallel facts: what a tensor- or pipeline-parallel run measured, and the layout search's table.

    facts = trial.metrics.distributed.parallel       # None for a pure data-parallel run
    facts.bubble_measured, facts.bubble_formula      # the pipeline's idle share: measured vs (p − 1) / (m + p − 1)
    results.layouts.rows                             # every (dp, tp, pp, micro-batch, checkpointing) candidate
    bubble_formula(stages=2, microbatches=4)         # the idle share a pipeline's shape alone implies: 0.2

Design notes: docs/results.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from perfscope.results.constraints import FRACTION, NAME, NON_NEGATIVE, SECONDS, SERIES
from perfscope.results.messages import Message

PruneReason = Literal["would not fit", "communication bound", "bubble", "inapplicable", "not needed"]


@dataclass(kw_only=True)
class ModelLayout:
    """How the model can be split, read in the probe (perfscope.trial.validate.inspect_model): what the layout knobs and search
    decide applicability and memory from, without building the model in the analyze process."""

    blocks: int = field(default=0, metadata=NON_NEGATIVE)
    """Repeated blocks: the pipeline splits between them (layers not divisible by pp leave the stages unequal)."""
    block_parameter_count: int = field(default=0, metadata=NON_NEGATIVE)
    tp_parameter_count: int = field(default=0, metadata=NON_NEGATIVE)
    """Parameters in the Linears the TP plan splits (the rest, embeddings, norms and head, stay replicated)."""
    tp_inapplicable: dict[str, Message] = field(default_factory=dict)
    """TP degree → why no correct plan exists for it (absent: the plan applies)."""
    tp_plan_source: str = field(default="", metadata=NAME)


@dataclass(kw_only=True)
class StageTiming:
    """One pipeline rank's time per step: its stages' forward + backward (+ the loss on the last stage) vs the step.

    Busy time is timed around the stage's own compute calls (`forward_one_chunk`, `backward_one_chunk`, the loss),
    never around the waits for a peer's activations or gradients, so it is the rank's work; the rest of the step is
    the bubble and the communication the schedule did not hide."""

    rank: int = field(metadata=NON_NEGATIVE)
    stages: list[int] = field(default_factory=list, metadata=SERIES)
    forward_s: float = field(default=0.0, metadata=SECONDS)
    """Median per step over the measured steps (sum over the step's micro-batches)."""
    backward_s: float = field(default=0.0, metadata=SECONDS)
    loss_s: float = field(default=0.0, metadata=SECONDS)
    step_s: float = field(default=0.0, metadata=SECONDS)
    """Median wall time of the schedule's step() on this rank."""
    idle_share: float = field(default=0.0, metadata=FRACTION)
    """1 − busy / step, per step, median over the steps."""
    forward_call_s: float = field(default=0.0, metadata=SECONDS)
    """One micro-batch's forward through one of the rank's stages, load-immune: the fastest call's CPU time on CPU,
    the fastest synchronized call on CUDA (perfscope.measure.bubble)."""
    backward_call_s: float = field(default=0.0, metadata=SECONDS)
    compute_clock: str = field(default="wall", metadata=NAME)
    """"thread CPU" | "process CPU" | "wall": how forward_call_s and backward_call_s were timed."""


@dataclass(kw_only=True)
class ParallelFacts:
    """The run's model-parallel layout and what it cost: the TP plan, the pipeline's stages and bubble."""

    data_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    tensor_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    pipeline_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    tp_plan: dict[str, str] = field(default_factory=dict)
    """Module name → ColwiseParallel / RowwiseParallel / SequenceParallel, as applied."""
    tp_plan_source: str = field(default="", metadata=NAME)
    schedule: str | None = None
    microbatches: int | None = field(default=None, metadata=NON_NEGATIVE)
    stages: list[StageTiming] = field(default_factory=list, metadata=SERIES)
    bubble_measured: float | None = field(default=None, metadata=FRACTION)
    """Mean over ranks of the idle share of the step (wall-clock, this machine's load included)."""
    bubble_formula: float | None = field(default=None, metadata=FRACTION)
    """(p − 1) / (m + p − 1) for equal stages (GPipe and 1F1B; ÷ v for the interleaved schedule)."""
    bubble_replayed: float | None = field(default=None, metadata=FRACTION)
    """The schedule's order replayed with each stage's load-immune compute per call and free communication:
    the bubble the schedule and the stages' balance imply; immune to a neighbour's load, unlike
    ``bubble_measured`` (perfscope.measure.bubble)."""
    stage_imbalance: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Busiest rank's compute / the mean − 1, from each stage's load-immune compute per call (``forward_call_s``,
    ``backward_call_s``, the loss), not the wall-clock busy time a neighbour's load inflates."""
    bubble_method: str = ""
    notes: list[Message] = field(default_factory=list)
    unavailable: dict[str, Message] = field(default_factory=dict)


@dataclass(kw_only=True)
class LayoutRow:
    """One candidate layout of the search: measured, failed, or pruned with the reason."""

    layout: str = field(metadata=NAME)
    data_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    tensor_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    pipeline_parallel: int = field(default=1, metadata=NON_NEGATIVE)
    micro_batch_size: int = field(default=1, metadata=NON_NEGATIVE)
    microbatches: int = field(default=1, metadata=NON_NEGATIVE)
    activation_checkpointing: bool = False
    status: Literal["measured", "failed", "pruned"] = "pruned"
    prune_reason: PruneReason | None = None
    reason: Message | None = None
    """Why it was pruned, failed, or how it was measured (e.g. under load)."""
    configuration: str | None = None
    """The trial (configuration name) that measured it."""
    memory_per_rank_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Modelled training state per rank: parameters + gradients + optimizer state (perfscope.search.layout)."""
    measured_state_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Counted from the run's tensors: the rank holding the most."""
    peak_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    samples_per_s: float | None = field(default=None, metadata=NON_NEGATIVE)
    samples_per_s_per_rank: float | None = field(default=None, metadata=NON_NEGATIVE)
    collective_s_per_step: float | None = field(default=None, metadata=SECONDS)
    exposed_collective_s_per_step: float | None = field(default=None, metadata=SECONDS)
    bubble: float | None = field(default=None, metadata=FRACTION)
    bubble_formula: float | None = field(default=None, metadata=FRACTION)


@dataclass(kw_only=True)
class LayoutTable:
    """The layout search for one world size: every candidate, ranked by measured throughput per rank."""

    world_size: int = field(metadata=NON_NEGATIVE)
    rows: list[LayoutRow] = field(default_factory=list, metadata=SERIES)
    memory_limit_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)
    """What one rank may hold: the device's memory (CUDA), else the host's memory / ranks per node."""
    method: str = ""
    notes: list[Message] = field(default_factory=list)

    def measured(self) -> list[LayoutRow]:
        return sorted((r for r in self.rows if r.status == "measured" and r.samples_per_s_per_rank is not None),
                      key=lambda r: -(r.samples_per_s_per_rank or 0.0))


__all__ = ["LayoutRow", "LayoutTable", "ModelLayout", "ParallelFacts", "PruneReason", "StageTiming"]


def bubble_formula(stages: int, microbatches: int, virtual: int = 1) -> float:
    """Idle share of a fill-drain pipeline of ``stages`` equal stages and ``microbatches`` micro-batches (``virtual``
    stages per rank with an interleaved schedule), communication free: (p − 1) / (v·m + p − 1). Pure arithmetic on a
    recorded layout, here so that the measurement, the pipeline-bubble rule, the layout search and the pipeline knob
    share one definition without a reader of results importing the measurement layer."""
    if stages < 1 or microbatches < 1 or virtual < 1:
        raise ValueError("stages, microbatches and virtual stages must be >= 1")
    return (stages - 1) / (virtual * microbatches + stages - 1)

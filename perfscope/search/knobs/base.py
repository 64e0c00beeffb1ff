"""What a knob is: one optimization, how it applies to a TrialConfig, when it cannot, and what it costs.

    class AmpBf16(Knob):
        id = "amp_bf16"; title = "bf16 autocast"
        def applies(self, ctx): ...            # None, or why not
        def variants(self, ctx): return [{"precision": "bf16"}]

A knob knows how to apply itself and what code change it stands for; it never knows how it is ranked
(that is the sweep's and the rules engine's business). `variants` lets one knob try a few settings
(e.g. num_workers 2 and 4); the sweep keeps the best.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from perfscope.results import Environment, ModelFacts, Trial
from perfscope.results.config import TrialConfig
from perfscope.workload import Workload


@dataclass(frozen=True, kw_only=True)
class KnobContext:
    """Everything a knob may look at to decide whether it applies."""

    workload: Workload
    base: TrialConfig
    environment: Environment
    model: ModelFacts

    @property
    def cuda(self) -> bool:
        return self.base.device == "cuda"

    @property
    def device(self) -> str:
        """The run's device type ("cpu" | "cuda"): the code changes shown to the user are written for it."""
        return self.base.device

    @property
    def capability(self) -> tuple[int, int] | None:
        cc = self.environment.compute_capability
        if not cc:
            return None
        major, minor = cc.split(".")
        return int(major), int(minor)

    @property
    def cores(self) -> int:
        return self.environment.cpu_cores_logical or 1

    @property
    def cores_per_rank(self) -> int:
        """This machine's cores shared by its ranks: each local rank runs its own loop (and its own DataLoader
        workers), so per-process advice divides the machine by ``nproc_per_node``."""
        return max(1, self.cores // self.base.nproc_per_node)


class Knob:
    """Base class: subclasses set the class attributes and override `variants` (and `applies` when needed)."""

    id: ClassVar[str]
    title: ClassVar[str]
    reference: ClassVar[str] = ""
    search: ClassVar[bool] = False
    """True for knobs the sweep handles with a dedicated search (micro-batch) instead of `variants`."""
    builds_on: ClassVar[str | None] = None
    """Id of a knob this one refines (persistent_workers needs dataloader_workers). When the baseline does not
    satisfy `prerequisite_met`, the sweep measures this knob on top of that knob's best variant, and stacks it
    only after that knob."""

    frees: ClassVar[Literal["activations", "optimizer state"] | None] = None
    """The device memory the knob gives back. Such a knob pays through the larger micro-batch that memory allows:
    on a GPU whose micro-batch search ran into memory, the sweep also measures it paired with the micro-batch
    that did not fit without it (twice the largest that fit for activations, which grow with the micro-batch;
    the first that did not fit for optimizer state, a fixed amount)."""
    cost: ClassVar[str] = ""
    """What the knob costs when memory is not the limit ("recompute", "host↔device copies"): the sweep's reason
    for not measuring an activation-freeing knob on a GPU whose micro-batch memory did not limit."""
    changes_recipe: ClassVar[bool] = False
    """True when the knob changes the training recipe (the optimizer): measured and reported with its caveats,
    never stacked into the recommendation — a few measured steps cannot show that the model still converges."""
    traced: ClassVar[bool] = False
    """True when what the knob costs is read from a profiler trace (offloading's PCIe copies): the sweep traces
    its first run, after the timed window as always."""

    def compatible(self, config: TrialConfig) -> bool:
        """False when the knob's settings cannot be applied on top of ``config`` (a DDP bucket size on an FSDP2
        model): the sweep's stacking then leaves it out rather than build an invalid configuration."""
        return True

    def prerequisite_met(self, config: TrialConfig) -> bool:
        """True when ``config`` already has what `builds_on` provides (only consulted when `builds_on` is set)."""
        return True

    def code_change(self, ctx: KnobContext) -> str | None:
        """Diff-style change to the user's own loop, shown in the report, written for the run's device (and torch
        version): a CPU run never reads `.cuda()`. None where the knob means nothing on this device."""
        raise NotImplementedError

    def applies(self, ctx: KnobContext) -> str | None:
        """None when the knob can be tried; otherwise the reason it cannot, in words a user understands."""
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        """TrialConfig changes to try; the sweep keeps the fastest."""
        raise NotImplementedError

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[str]:
        """How adopting it changes training beyond speed (numerics, global batch); empty when it does not."""
        return []

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        """What a measured run shows about the knob beyond speed (memory it freed, traffic it added), in words
        for the report; ``baseline`` is a baseline run to compare with."""
        return []

    def apply(self, config: TrialConfig, changes: dict[str, Any]) -> TrialConfig:
        """``config`` with one of `variants`' changes (a knob may try several settings, so the variant is an
        argument); ``env`` entries are merged, not replaced."""
        merged = dict(changes)
        if "env" in merged:
            merged["env"] = {**config.env, **merged["env"]}
        return config.replace(**merged)


def size(n: float) -> str:
    """Bytes in binary units, for the knobs' notes ("1.5 MiB")."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def data_parallel_reason(ctx: KnobContext) -> str | None:
    """Why a knob that changes how the harness wraps the model cannot be tried, or None: it needs data-parallel
    ranks, and a model perfscope wraps (a model the user's factory already wrapped cannot be re-wrapped)."""
    if ctx.base.world_size < 2:
        return ("one process (world size 1): there are no data-parallel ranks and no gradient communication; "
                "run perfscope analyze with --nproc-per-node N (torchrun) to measure it")
    if ctx.workload.wraps_model or ctx.base.data_parallel == "none":
        return ("the workload wraps its own model (Workload.wraps_model=True): perfscope cannot re-wrap it, so it "
                "cannot measure a different wrapper's settings; let perfscope wrap it (wraps_model=False) to measure them")
    return None


def ddp_reason(ctx: KnobContext, setting: str) -> str | None:
    """`data_parallel_reason`, and the model must be DistributedDataParallel's (plain, or under ZeRO-1)."""
    reason = data_parallel_reason(ctx)
    if reason is None and ctx.base.data_parallel not in ("ddp", "zero1"):
        return (f"{setting} is a DistributedDataParallel setting; this run shards the model with FSDP2, which "
                "communicates per fully_shard unit instead of in DDP's gradient buckets")
    return reason


def is_ddp(config: TrialConfig) -> bool:
    """The model is DistributedDataParallel's: plain DDP, or DDP with ZeroRedundancyOptimizer."""
    return config.data_parallel in ("ddp", "zero1")

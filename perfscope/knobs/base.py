"""What a knob is: one optimization, everything perfscope knows about it, in the knob's own file.

Design notes: docs/sweep.md."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from perfscope.results import Environment, ModelFacts, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message
from perfscope.workload import Workload


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What the trial process actually ran with, read at the end of the timed window (perfscope.trial.loop
    reads it; each knob's `Knob.not_applied` judges its own setting from it): facts of the run several knobs read,
    and what each active knob recorded for itself (`Knob.record`)."""

    compiled_graphs: int | None = None
    """Graphs dynamo compiled in this trial (None: not compiling, or dynamo never imported)."""
    env: dict[str, str | None] = field(default_factory=dict)
    """The config's environment variables as this process sees them (None: unset)."""
    matmul_flops_by_dtype: dict[str, float] | None = None
    """Matmul FLOPs by input dtype from the structural fingerprint (None: not counted)."""
    recorded: dict[str, Any] = field(default_factory=dict)
    """Knob id -> what its `Knob.record` returned at the end of the timed window (absent: nothing recorded)."""


@dataclass(frozen=True, kw_only=True)
class Loop:
    """What a Profiler in the user's own loop shows a knob (`Knob.observe`): the objects it was given."""

    device: str
    """The loop's device type ("cpu" | "cuda")."""
    model: Any = None
    optimizer: Any = None


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
    """Base class: subclasses set the class attributes, `value` or `variants`, and `applies` when needed."""

    id: ClassVar[str]
    title: ClassVar[str]
    reference: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()
    """The TrialConfig fields its variants set: `active` reads them, the report names them, and a Profiler in
    the user's own loop lists them as unknown when `observed_by_hooks` is False. Empty: the knob's setting lives in
    ``TrialConfig.knob_settings[id]`` (`settings` names it either way)."""
    value: ClassVar[Any] = None
    """The value of ``fields[0]`` in the knob's one variant (None: the knob overrides `variants`)."""
    shares_field: ClassVar[bool] = False
    """True when other knobs set ``fields[0]`` too (precision, compile, optimizer, data_parallel): this one is active
    only at its own `value`."""
    addresses: ClassVar[tuple[str, ...]] = ()
    """The slices of the step-time breakdown (keys of perfscope.results.breakdown.SLICES, "step" for all) it
    acts on: a finding about it says which part of the step it can shrink. Empty for memory knobs."""
    search: ClassVar[Literal["variants", "micro_batch"]] = "variants"
    """How the sweep measures it: each of `variants` in turn, or a point of the one micro-batch search
    (doubling until OOM or no gain, then bisection: perfscope.search.microbatch) — `keeps_global_batch`
    says which point."""
    keeps_global_batch: ClassVar[bool] = False
    """A micro-batch-search knob: its point is the fastest that keeps the user's global batch (accumulation
    traded for micro-batch) and it joins the recommendation last; False: the fastest point overall."""
    observed_by_hooks: ClassVar[bool] = True
    """For a knob with `fields`: True when the hooks' own reading of the loop settles them (precision, compile,
    TF32, the DataLoader, the wrapper); False when nothing can (a checkpointed block looks like any other). A knob
    whose `observe` returns a reading is observed either way; one with no `fields` only through `observe`."""
    gap_parts: ClassVar[tuple[str, ...]] = ()
    """Parts of the MFU waterfall (keys of perfscope.results.waterfall.PARTS) it acts on beyond those its
    `addresses` reach: a part with no slice of the step (activation checkpointing's "recompute")."""
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

    @property
    def settings(self) -> tuple[str, ...]:
        """Where its setting lives in a TrialConfig: its `fields`, else ``knob_settings.<id>``. The keys of
        `Trial.unknown_settings` and `TrialMetrics.not_applied` for this knob."""
        return self.fields or (f"knob_settings.{self.id}",)

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
        """TrialConfig changes to try; the sweep keeps the fastest. Default: ``fields[0]`` set to ``value``."""
        if self.value is None:
            raise NotImplementedError(f"{type(self).__name__} sets neither `value` nor `variants()`")
        return [{self.fields[0]: self.value}]

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        """How adopting it changes training beyond speed, as messages whose code is the kind ("numerics", "global_batch",
        "training_recipe", ...: perfscope.ranking decides on it); empty when it does not."""
        return []

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        """What a measured run shows about the knob beyond speed (memory it freed, traffic it added), in words
        for the report; ``baseline`` is a baseline run to compare with."""
        return []

    def apply(self, config: TrialConfig, changes: dict[str, Any]) -> TrialConfig:
        """``config`` with one of `variants`' changes (a knob may try several settings, so the variant is an
        argument); ``env`` and ``knob_settings`` entries are merged, not replaced."""
        merged = dict(changes)
        for key in ("env", "knob_settings"):
            if key in merged:
                merged[key] = {**getattr(config, key), **merged[key]}
        return config.replace(**merged)

    # ------------------------------------------------------------------ words (the report and the findings)

    def describe(self, changes: dict[str, Any]) -> str:
        """A variant's value in words ("4 workers", "micro-batch 32 × accumulation 2"): the outcome's setting."""
        return describe_setting(changes)

    def config_words(self, config: TrialConfig) -> str | None:
        """Its setting in ``config`` in words, for the report's summary of a configuration ("bf16 autocast");
        None when it has nothing to say (off, or another knob names the field)."""
        return None

    # ------------------------------------------------- the trial (trial/loop.py, trial/data.py call these)

    def active(self, config: TrialConfig) -> bool:
        """Whether ``config`` runs with this knob: a field of `fields` off its default, or a value in
        ``knob_settings``. Only active knobs' hooks are called. A knob that `shares_field` is active at its `value`."""
        if self.id in config.knob_settings:
            return True
        if self.shares_field:
            return getattr(config, self.fields[0]) == self.value
        return any(getattr(config, name) != field_default(name) for name in self.fields)

    def before_steps(self, config: TrialConfig) -> None:
        """Process-wide switches, after the user's file and model factory ran and before the first step (TF32)."""

    def apply_to_model(self, model: Any, config: TrialConfig, workload: Workload) -> Any:
        """The model placed on its device, before any wrapper (checkpointing, channels_last); returns it."""
        return model

    def apply_to_step_module(self, module: Any, config: TrialConfig) -> Any:
        """The module each step calls, after the data-parallel wrapper and the optimizer (torch.compile)."""
        return module

    def apply_to_loader(self, config: TrialConfig) -> dict[str, Any]:
        """DataLoader arguments (num_workers, pin_memory, ...); pinned batches are copied non_blocking."""
        return {}

    def apply_to_batch(self, batch: Any, config: TrialConfig) -> Any:
        """A batch once on the device (channels_last inputs); returns it."""
        return batch

    def loss_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        """Entered around every computation of the loss, FLOP counting included (autocast)."""
        return None

    def step_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        """Entered around each training micro-batch's forward, not FLOP counting (activation offloading's
        saved-tensor hooks: what the forward saves, backward reads back after the context closed)."""
        return None

    def window_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        """Entered around the timed window (gc.freeze)."""
        return None

    def grad_scaler(self, config: TrialConfig) -> Any | None:
        """A loss scaler the step scales backward and steps the optimizer through (fp16's GradScaler)."""
        return None

    def record(self, config: TrialConfig) -> Any:
        """What `not_applied` needs, read at the end of the timed window, still inside the window contexts (the
        process state the steps left: gc.get_freeze_count()); kept in ``Observed.recorded[id]``. None: nothing."""
        return None

    def not_applied(self, config: TrialConfig, seen: Observed) -> str | None:
        """Why the run did not run with this knob after all, from what the trial saw at the end of its timed
        steps (perfscope.trial.loop.not_applied: the user's code switched it back); None when it did, or cannot tell."""
        return None

    # ------------------------------------------------------- a Profiler in the user's own loop (perfscope.hooks)

    def observe(self, loop: Loop) -> dict[str, Any] | None:
        """Its setting as the user's loop runs it, read when the Profiler builds its results: TrialConfig changes
        as `variants` writes them (``{}``: observed, at its default). None: not observed, so `settings` are the
        run's unknown settings (a knob with `fields` and `observed_by_hooks` is read by the hooks themselves)."""
        return None


def field_default(name: str) -> Any:
    """A TrialConfig field's default value (a knob is active where its field differs from it)."""
    for f in dataclasses.fields(TrialConfig):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            raise ValueError(f"TrialConfig.{name} has no default: a knob cannot be off there")
    raise KeyError(f"TrialConfig has no field {name!r}")


def describe_setting(changes: dict[str, Any]) -> str:
    """A knob's winning value in words, for the report ("micro-batch 32 × accumulation 2", "4 workers")."""
    words = []
    for key, value in changes.items():
        if key == "micro_batch_size":
            words.append(f"micro-batch {value}")
        elif key == "grad_accum_steps":
            words.append(f"accumulation {value}")
        elif key == "num_workers":
            words.append(f"{value} worker{'s' if value != 1 else ''}")
        elif key in ("env", "knob_settings"):
            words += [f"{k}={v}" for k, v in value.items()]
        elif value is True:
            words.append(key.replace("_", " "))
        else:
            words.append(f"{key.replace('_', ' ')} {value}")
    return " × ".join(words)


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


class DdpOption(Knob):
    """A DistributedDataParallel setting: stacked only onto a configuration whose model is DDP's (plain, or under
    ZeroRedundancyOptimizer)."""

    reference = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"

    def compatible(self, config: TrialConfig) -> bool:
        return config.data_parallel in ("ddp", "zero1")

"""What a knob is: one optimization, everything perfscope knows about it, in the knob's own file.

Design notes: docs/sweep.md."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from perfscope.results import Environment, ModelFacts, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import ddp_option_change
from perfscope.wording.structure import size
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


def set_back(why: str) -> Message:
    """A `Knob.not_applied` in the knob's own words: for a knob registered outside perfscope, whose words have no
    template in perfscope.wording (perfscope's own knobs return a message of their own code)."""
    return msg("knob_set_back", why=why)


class Knob:
    """Base class: subclasses set the class attributes, `value` or `variants`, and `applies` when needed. What each
    attribute and hook means, and how the sweep, the trial, the report and the hooks use it: docs/sweep.md, "Adding
    a knob"."""

    id: ClassVar[str]
    title: ClassVar[str]
    reference: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()
    """The TrialConfig fields its variants set; empty: its setting lives in ``TrialConfig.knob_settings[id]``."""
    value: ClassVar[Any] = None
    """The value of ``fields[0]`` in the knob's one variant, and what `shares_field` compares (None, or a knob that
    overrides `variants`: its variants set the fields)."""
    shares_field: ClassVar[bool] = False
    """Other knobs set ``fields[0]`` too (precision, compile, optimizer): this one is active only at its `value`."""
    addresses: ClassVar[tuple[str, ...]] = ()
    """The step-time slices it acts on (perfscope.results.breakdown.SLICES, "step" for all); empty for memory knobs."""
    search: ClassVar[Literal["variants", "micro_batch"]] = "variants"
    """Each of `variants` in turn, or a point of the one micro-batch search (perfscope.search.microbatch)."""
    keeps_global_batch: ClassVar[bool] = False
    """Its micro-batch point is the fastest that keeps the user's global batch (False: the fastest overall)."""
    observed_by_hooks: ClassVar[bool] = True
    """The hooks' own reading of the loop settles its `fields` (False: nothing can, unless `observe` does)."""
    gap_parts: ClassVar[tuple[str, ...]] = ()
    """MFU-waterfall parts it acts on that no slice of the step holds (checkpointing's "recompute")."""
    builds_on: ClassVar[str | None] = None
    """Id of a knob it refines: measured on top of that knob's best variant unless `prerequisite_met`."""
    frees: ClassVar[Literal["activations", "optimizer state"] | None] = None
    """The device memory it gives back: the sweep also measures it with the micro-batch that did not fit without it."""
    cost: ClassVar[str] = ""
    """What it costs when memory is not the limit ("recompute"): why such a knob was not measured."""
    changes_recipe: ClassVar[bool] = False
    """It changes the training recipe (the optimizer): measured and reported with its caveats, never stacked."""
    traced: ClassVar[bool] = False
    """What it costs is read from a profiler trace (offloading's copies): the sweep traces its first run."""

    @property
    def settings(self) -> tuple[str, ...]:
        """Where its setting lives in a TrialConfig (the keys of `Trial.unknown_settings`, `TrialMetrics.not_applied`)."""
        return self.fields or (f"knob_settings.{self.id}",)

    def compatible(self, config: TrialConfig) -> bool:
        """False when its settings cannot stack onto ``config`` (a DDP bucket size on an FSDP2 model)."""
        return True

    def prerequisite_met(self, config: TrialConfig) -> bool:
        """True when ``config`` already has what `builds_on` provides (only consulted when `builds_on` is set)."""
        return True

    def code_change(self, ctx: KnobContext) -> str | None:
        """Diff-style change to the user's own loop, written for the run's device (and torch version); None where
        the knob means nothing on this device."""
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
        """How adopting it changes training beyond speed: messages whose code is the kind ("numerics", ...)."""
        return []

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        """What its run shows beyond speed (memory it freed, traffic it added), against a ``baseline`` run."""
        return []

    def apply(self, config: TrialConfig, changes: dict[str, Any]) -> TrialConfig:
        """``config`` with one of `variants`' changes; ``env`` and ``knob_settings`` entries are merged, not replaced."""
        merged = dict(changes)
        for key in ("env", "knob_settings"):
            if key in merged:
                merged[key] = {**getattr(config, key), **merged[key]}
        return config.replace(**merged)

    # ------------------------------------------------------------------ words (the report and the findings)

    def describe(self, changes: dict[str, Any]) -> str:
        """A variant's value in words ("4 workers", "micro-batch 32 × accumulation 2"): the outcome's setting."""
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

    def config_words(self, config: TrialConfig) -> str | None:
        """Its setting in ``config`` in words ("bf16 autocast"); None: off, or another knob names the field."""
        return None

    # ------------------------------------------------- the trial (trial/loop.py, trial/data.py call these)

    def active(self, config: TrialConfig) -> bool:
        """Whether ``config`` runs with it (only active knobs' hooks are called): its id in ``knob_settings``, a field
        off its default, or for a knob that `shares_field` its `value`."""
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
        """Entered around each training micro-batch's forward, not FLOP counting (offloading's saved-tensor hooks)."""
        return None

    def window_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        """Entered around the timed window (gc.freeze)."""
        return None

    def grad_scaler(self, config: TrialConfig) -> Any | None:
        """A loss scaler the step scales backward and steps the optimizer through (fp16's GradScaler)."""
        return None

    def record(self, config: TrialConfig) -> Any:
        """What `not_applied` needs, read at the end of the timed window inside its contexts (``Observed.recorded``)."""
        return None

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        """Why the run did not run with it after all (the user's code switched it back); None: it did, or unknown."""
        return None

    # ------------------------------------------------------- a Profiler in the user's own loop (perfscope.hooks)

    def observe(self, loop: Loop) -> dict[str, Any] | None:
        """Its setting in a Profiler's loop, as `variants` writes it (``{}``: at its default); None: not observed."""
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


def freed(before: int, after: int) -> str:
    """"1.0 GiB → 256.0 MiB: frees 768.0 MiB (75%)", or "...: grows by ..." when ``after`` is larger."""
    change = before - after
    if change < 0:
        return f"{size(before)} → {size(after)}: grows by {size(-change)}"
    return f"{size(before)} → {size(after)}: frees {size(change)}" + (f" ({change / before:.0%})" if change > 0 else "")


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
    why: ClassVar[str] = ""
    """For a DDP flag set to `value` (the defaults below): the comment beside the argument in the code change."""

    def compatible(self, config: TrialConfig) -> bool:
        return config.data_parallel in ("ddp", "zero1")

    def code_change(self, ctx: KnobContext) -> str | None:
        return ddp_option_change(ctx.device, self.why, **{self.fields[0]: self.value})

    def applies(self, ctx: KnobContext) -> str | None:
        if getattr(ctx.base, self.fields[0]):
            return f"{self.fields[0]} is already on"
        return ddp_reason(ctx, self.fields[0])

"""The registry of optimization knobs. Adding a knob = one module with a Knob subclass + one line here + its test.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.adafactor import Adafactor
from perfscope.knobs.adamw_8bit import AdamW8bit
from perfscope.knobs.allocator import ExpandableSegments
from perfscope.knobs.amp import AmpBf16, AmpFp16
from perfscope.knobs.base import Knob, KnobContext, Loop, ModelFacts, Observed
from perfscope.knobs.channels_last import ChannelsLast
from perfscope.knobs.checkpointing import ActivationCheckpointing
from perfscope.knobs.compile import Compile, CompileReduceOverhead
from perfscope.knobs.dataloader import DataLoaderWorkers, PersistentWorkers, PinMemory, PrefetchFactor
from perfscope.knobs.ddp_bucket_cap import DdpBucketCap
from perfscope.knobs.ddp_bucket_view import DdpBucketView
from perfscope.knobs.ddp_static_graph import DdpStaticGraph
from perfscope.knobs.fsdp2 import Fsdp2
from perfscope.knobs.fsdp_mixed_precision import FsdpMixedPrecision
from perfscope.knobs.gc_freeze import GcFreeze
from perfscope.knobs.grad_accum import GradAccum
from perfscope.knobs.grad_compression import GradCompression
from perfscope.knobs.micro_batch import MicroBatch
from perfscope.knobs.no_sync_accumulation import NoSyncAccumulation
from perfscope.knobs.numa_binding import NumaBinding
from perfscope.knobs.offloading import ActivationOffloading
from perfscope.knobs.optimizer import FusedOptimizer
from perfscope.knobs.pipeline_parallel import PipelineParallel
from perfscope.knobs.tensor_parallel import TensorParallel
from perfscope.knobs.tf32 import Tf32
from perfscope.knobs.zero1 import Zero1
from perfscope.registry import Registry
from perfscope.results.config import TrialConfig

REGISTRY: Registry[Knob] = Registry([
    AmpBf16(),
    AmpFp16(),
    Tf32(),
    Compile(),
    CompileReduceOverhead(),
    FusedOptimizer(),
    ChannelsLast(),
    DataLoaderWorkers(),
    PersistentWorkers(),
    PrefetchFactor(),
    PinMemory(),
    GcFreeze(),
    ExpandableSegments(),
    ActivationCheckpointing(),
    ActivationOffloading(),
    Adafactor(),
    AdamW8bit(),
    # data parallel (distributed runs): the wrapper, then its settings (fsdp_mixed_precision builds on fsdp2)
    Fsdp2(),
    FsdpMixedPrecision(),
    Zero1(),
    DdpBucketCap(),
    DdpBucketView(),
    DdpStaticGraph(),
    NoSyncAccumulation(),
    GradCompression(),
    NumaBinding(),
    # model parallel (distributed runs): measured at the same global batch, never stacked (perfscope.search.layout)
    TensorParallel(),
    PipelineParallel(),
    MicroBatch(),
    GradAccum(),
], key=lambda k: k.id, what="knob")


knob = REGISTRY.get
"""The registered knob of an id (KeyError when none is)."""


def knob_ids() -> list[str]:
    return [k.id for k in REGISTRY]


register = REGISTRY.register
"""Add a knob after the built-in ones (the trial sees it when it runs in this process or a fork of it)."""
registered = REGISTRY.registered
"""`register` for the length of a block (tests)."""


def active_knobs(config: TrialConfig) -> list[Knob]:
    """The knobs ``config`` runs with, in registry order: the trial calls their hooks."""
    return [k for k in REGISTRY if k.active(config)]


def loader_options(config: TrialConfig) -> dict[str, Any]:
    """The DataLoader arguments the active knobs ask for (pin_memory, num_workers, ...)."""
    options: dict[str, Any] = {}
    for k in active_knobs(config):
        options.update({key: value for key, value in k.apply_to_loader(config).items() if value is not None})
    return options


def observe_loop(loop: Loop) -> tuple[dict[str, Any], list[str]]:
    """What every registered knob reads of a Profiler's loop (`Knob.observe`): the TrialConfig changes observed,
    and the settings nothing observed — a knob's own reading wins over `observed_by_hooks`; a knob with no field
    is unknown unless it reads itself. A reading that raises is no reading: a knob never costs the user's results."""
    known: dict[str, Any] = {}
    unknown: list[str] = []
    for k in REGISTRY:
        try:
            seen = k.observe(loop)
        except Exception:  # noqa: BLE001 - a plugin knob's bug leaves its setting unknown, never the run
            seen = None
        if seen is not None:
            settings = {**known.get("knob_settings", {}), **seen.get("knob_settings", {})}
            known.update(seen)
            if settings:
                known["knob_settings"] = settings
        elif not (k.fields and k.observed_by_hooks):
            unknown += k.settings
    return known, list(dict.fromkeys(unknown))


__all__ = ["REGISTRY", "Knob", "KnobContext", "Loop", "ModelFacts", "Observed", "active_knobs", "knob", "knob_ids",
           "loader_options", "observe_loop", "register", "registered"]

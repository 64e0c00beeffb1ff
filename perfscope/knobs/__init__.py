"""The registry of optimization knobs. Adding a knob = one module with a Knob subclass + one line here + its test.

    from perfscope.knobs import REGISTRY, knob
    [k.id for k in REGISTRY]
"""

from __future__ import annotations

from perfscope.knobs.allocator import ExpandableSegments
from perfscope.knobs.amp import AmpBf16, AmpFp16
from perfscope.knobs.base import Knob, KnobContext, ModelFacts
from perfscope.knobs.channels_last import ChannelsLast
from perfscope.knobs.checkpointing import ActivationCheckpointing
from perfscope.knobs.compile import Compile, CompileReduceOverhead
from perfscope.knobs.dataloader import (
    DataLoaderWorkers,
    PersistentWorkers,
    PinMemory,
    PrefetchFactor,
)
from perfscope.knobs.gc_freeze import GcFreeze
from perfscope.knobs.grad_accum import GradAccum
from perfscope.knobs.micro_batch import MicroBatch
from perfscope.knobs.optimizer import FusedOptimizer
from perfscope.knobs.tf32 import Tf32

REGISTRY: list[Knob] = [
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
    MicroBatch(),
    GradAccum(),
]


def knob(knob_id: str) -> Knob:
    for k in REGISTRY:
        if k.id == knob_id:
            return k
    raise KeyError(knob_id)


def knob_ids() -> list[str]:
    return [k.id for k in REGISTRY]


__all__ = ["REGISTRY", "Knob", "KnobContext", "ModelFacts", "knob", "knob_ids"]

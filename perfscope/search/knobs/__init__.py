"""The registry of optimization knobs. Adding a knob = one module with a Knob subclass + one line here + its test.

    from perfscope.search.knobs import REGISTRY, knob
    [k.id for k in REGISTRY]
"""

from __future__ import annotations

from perfscope.search.knobs.adafactor import Adafactor
from perfscope.search.knobs.adamw_8bit import AdamW8bit
from perfscope.search.knobs.allocator import ExpandableSegments
from perfscope.search.knobs.amp import AmpBf16, AmpFp16
from perfscope.search.knobs.base import Knob, KnobContext, ModelFacts
from perfscope.search.knobs.channels_last import ChannelsLast
from perfscope.search.knobs.checkpointing import ActivationCheckpointing
from perfscope.search.knobs.compile import Compile, CompileReduceOverhead
from perfscope.search.knobs.dataloader import (
    DataLoaderWorkers,
    PersistentWorkers,
    PinMemory,
    PrefetchFactor,
)
from perfscope.search.knobs.ddp_bucket_cap import DdpBucketCap
from perfscope.search.knobs.ddp_bucket_view import DdpBucketView
from perfscope.search.knobs.ddp_static_graph import DdpStaticGraph
from perfscope.search.knobs.fsdp2 import Fsdp2
from perfscope.search.knobs.fsdp_mixed_precision import FsdpMixedPrecision
from perfscope.search.knobs.gc_freeze import GcFreeze
from perfscope.search.knobs.grad_accum import GradAccum
from perfscope.search.knobs.grad_compression import GradCompression
from perfscope.search.knobs.micro_batch import MicroBatch
from perfscope.search.knobs.no_sync_accumulation import NoSyncAccumulation
from perfscope.search.knobs.numa_binding import NumaBinding
from perfscope.search.knobs.offloading import ActivationOffloading
from perfscope.search.knobs.optimizer import FusedOptimizer
from perfscope.search.knobs.pipeline_parallel import PipelineParallel
from perfscope.search.knobs.tensor_parallel import TensorParallel
from perfscope.search.knobs.tf32 import Tf32
from perfscope.search.knobs.zero1 import Zero1

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
]


def knob(knob_id: str) -> Knob:
    for k in REGISTRY:
        if k.id == knob_id:
            return k
    raise KeyError(knob_id)


def knob_ids() -> list[str]:
    return [k.id for k in REGISTRY]


__all__ = ["REGISTRY", "Knob", "KnobContext", "ModelFacts", "knob", "knob_ids"]

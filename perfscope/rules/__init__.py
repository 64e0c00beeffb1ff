"""The rules: one diagnosis per module, registered here. Adding a rule = one module + one line in REGISTRY + its test
(or `register(MyRule())` from a plugin): the engine, the ranking, the report, `perfscope rules`, docs/rules.md and
the MFU waterfall's links all read the registry.

    from perfscope.rules import run_rules, all_rules
    results.findings = run_rules(results)
"""

from __future__ import annotations

from perfscope.registry import Registry
from perfscope.results import Finding, Results
from perfscope.rules import engine
from perfscope.rules._text import label_trace_estimates
from perfscope.rules.compile_fusion import CompileFusion
from perfscope.rules.data_loader_stall import DataLoaderStall
from perfscope.rules.data_parallel_memory import DataParallelMemory
from perfscope.rules.engine import Rule, RuleContext, RuleDoc, partition_findings
from perfscope.rules.exposed_communication import ExposedCommunication
from perfscope.rules.fragmentation import AllocatorFragmentation
from perfscope.rules.gc_pauses import GcPauses
from perfscope.rules.host_saturation import HostCpuSaturation
from perfscope.rules.launch_bound import LaunchBound
from perfscope.rules.measured_knob import MeasuredKnob
from perfscope.rules.memory_headroom import MemoryHeadroom
from perfscope.rules.misaligned_gemm import MisalignedGemm
from perfscope.rules.mixed_precision import MixedPrecision
from perfscope.rules.model_parallel_memory import ModelParallelMemory
from perfscope.rules.near_oom import NearOom
from perfscope.rules.nonfinite import NonFiniteLoss
from perfscope.rules.numa_binding import NumaBinding
from perfscope.rules.optimizer_state import OptimizerState
from perfscope.rules.pageable_copies import PageableCopies
from perfscope.rules.pipeline_bubble import PipelineBubble
from perfscope.rules.stragglers import Stragglers
from perfscope.rules.sync_points import SyncPoints
from perfscope.rules.tensor_parallel_communication import TensorParallelCommunication
from perfscope.rules.tf32 import Tf32Matmul
from perfscope.rules.throttling import Throttling


def _documented(new: Rule) -> None:
    """docs/rules.md and `perfscope rules` are generated from a rule's docstring and `doc`: refused without them."""
    if not isinstance(getattr(new, "doc", None), RuleDoc) or not (type(new).__doc__ or "").strip():
        raise TypeError(f"rule {new.id!r} needs a docstring and a `doc = RuleDoc(...)`: its documentation is generated from them")


REGISTRY: Registry[Rule] = Registry([
    MeasuredKnob(),
    MixedPrecision(),
    Tf32Matmul(),
    DataLoaderStall(),
    PageableCopies(),
    LaunchBound(),
    SyncPoints(),
    CompileFusion(),
    MisalignedGemm(),
    MemoryHeadroom(),
    NearOom(),
    OptimizerState(),
    AllocatorFragmentation(),
    NonFiniteLoss(),
    GcPauses(),
    HostCpuSaturation(),
    Throttling(),
    ExposedCommunication(),
    Stragglers(),
    DataParallelMemory(),
    NumaBinding(),
    ModelParallelMemory(),
    TensorParallelCommunication(),
    PipelineBubble(),
], key=lambda r: r.id, what="rule", check=_documented)
"""The rules in the order they run (their findings are ranked by perfscope.ranking, whatever this order)."""


def all_rules() -> list[Rule]:
    """Every registered rule: the engine, `perfscope rules`, docs/rules.md and the MFU waterfall's links read this."""
    return list(REGISTRY)


rule = REGISTRY.get
"""The registered rule of an id (KeyError when none is)."""
register = REGISTRY.register
"""Add a rule after the built-in ones (a plugin, a test): it runs, is ranked, rendered and documented at once."""
registered = REGISTRY.registered
"""`register` for the length of a block (tests)."""


def run_rules(results: Results) -> list[Finding]:
    """All rules on ``results``, de-duplicated and ranked (measured, then estimated, then diagnoses); a trace's
    findings labelled as estimates (nothing was measured)."""
    findings = engine.run(results, all_rules())
    return label_trace_estimates(findings) if results.source == "trace" else findings


__all__ = ["REGISTRY", "Rule", "RuleContext", "RuleDoc", "all_rules", "partition_findings", "register", "registered", "rule", "run_rules"]

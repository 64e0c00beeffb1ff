"""The structural fingerprint of one optimizer step: what the step *does*, counted, not how long it took.

    fp = trial.metrics.fingerprint
    fp.syncs_per_step, fp.op_calls, fp.matmul_dtype_shares(), fp.compile.graph_breaks

Design notes: docs/results.md.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field

from perfscope.results.messages import Message
from perfscope.results.serde import to_jsonable


@dataclass(kw_only=True)
class SyncSite:
    """One kind of host↔device synchronization at one call site, per optimizer step."""

    op: str
    """What synchronizes: "aten::_local_scalar_dense (.item())", "aten::nonzero", "D2H copy (.cpu())", ..."""
    site: str
    """The user's call site, "file.py:42" (first frame outside torch and perfscope), or "" when none was found."""
    count: int
    """Calls per optimizer step."""

    @property
    def key(self) -> str:
        return f"{self.op} at {self.site}" if self.site else self.op


@dataclass(kw_only=True)
class WindowSyncs:
    """Host↔device syncs over every timed step of the window, not one counted step: a sync every N steps (a loss
    logged every 10 steps) shows here. CUDA only: torch's sync debug mode warns at each synchronizing call and the
    warnings are counted by call site (perfscope.measure.structure.WindowSyncCounter); nothing is synchronized."""

    steps: int
    """Timed optimizer steps the syncs were counted over."""
    sites: dict[str, int] = field(default_factory=dict)
    """Call site ("train.py:42", "" when none was found) -> synchronizing calls in those steps."""
    source: str = ""

    def per_step(self, site: str) -> float:
        return self.sites.get(site, 0) / self.steps if self.steps else 0.0


@dataclass(kw_only=True)
class CopyStat:
    """Host↔device copies of one kind ("h2d pageable", "h2d pinned", "d2h pageable", "d2h pinned") per step."""

    count: int
    bytes: int


@dataclass(kw_only=True)
class CompileFacts:
    """What torch.compile (dynamo) did in this run, from torch._dynamo.utils.counters (deltas over the trial)."""

    graphs: int
    """Unique graphs compiled (counters["stats"]["unique_graphs"])."""
    graph_breaks: int
    """Graph breaks seen while compiling (sum of counters["graph_break"])."""
    break_reasons: dict[str, int] = field(default_factory=dict)
    """Graph-break reason (dynamo's text, first line) -> times seen."""
    recompiles: int = 0
    """Frames compiled beyond the first compile of each frame (guard failures, new shapes)."""


@dataclass(kw_only=True)
class MemoryPeak:
    """An allocator peak: the one fingerprint field identical code can move, so it carries its tolerance."""

    bytes: int
    tolerance: float
    """Relative change that still counts as unchanged (e.g. 0.02 = 2%)."""
    source: str


@dataclass(kw_only=True)
class Fingerprint:
    """Per optimizer step: FLOPs and op calls by op, syncs with call sites, copies, matmul dtype mix, compile."""

    method: str
    """How it was counted (one real step under a dispatch mode, outside the timed window; or the hooks' step)."""
    steps: int = 1
    """Optimizer steps the per-step counts were taken from: one. A sync every N steps is in `syncs` only when that
    step hits it; `window_syncs` covers every timed step where syncs can be counted without adding any (CUDA)."""
    flops: float = 0.0
    """Matmul/conv/attention FLOPs per step, torch.utils.flop_counter's convention."""
    flops_by_op: dict[str, float] = field(default_factory=dict)
    """Op ("aten::mm") -> FLOPs per step; only ops with FLOPs."""
    op_calls: int = 0
    """aten op calls per step seen by the dispatcher (forward, backward, optimizer, the batch's copy)."""
    ops: dict[str, int] = field(default_factory=dict)
    """Op ("aten::addmm") -> calls per step."""
    syncs: list[SyncSite] = field(default_factory=list)
    """Host↔device synchronizations per step by op and call site (ops that sync on a GPU, counted on any device)."""
    copies: dict[str, CopyStat] = field(default_factory=dict)
    """Host↔device copies per step by kind; empty on a CPU-only run."""
    matmul_flops_by_dtype: dict[str, float] = field(default_factory=dict)
    """Input dtype ("bf16", "fp16", "fp32", ...) -> matmul/conv/attention FLOPs per step."""
    compile: CompileFacts | None = None
    """None when the step is not compiled."""
    kernel_launches: dict[str, int] | None = None
    """CUDA only, from the profiled window (perfscope.results.trace_facts): kernel category -> launches per step."""
    memory: MemoryPeak | None = None
    """CUDA allocator peak (max allocated); None on a CPU (host RSS is not an allocator peak)."""
    window_syncs: WindowSyncs | None = None
    """Syncs over the whole timed window (CUDA); None with the reason in `unavailable` elsewhere."""
    unavailable: dict[str, Message] = field(default_factory=dict)

    @property
    def syncs_per_step(self) -> int:
        return sum(s.count for s in self.syncs)

    def matmul_dtype_shares(self) -> dict[str, float]:
        """dtype -> share of matmul FLOPs (sums to 1); empty without matmul FLOPs."""
        total = sum(self.matmul_flops_by_dtype.values())
        return {d: v / total for d, v in sorted(self.matmul_flops_by_dtype.items())} if total else {}


RUN_DEPENDENT_FIELDS = ("memory", "kernel_launches", "window_syncs", "unavailable")
"""Fields that differ between runs of identical code for reasons other than the code: the allocator peak moves
within its tolerance, kernel launches exist only on the run that was traced (analyze traces one run of the
baseline and one of the recommendation), and a window's syncs depend on its calibrated length. Runs agree or
disagree on the rest."""


@dataclass(frozen=True, kw_only=True)
class Consensus:
    """The fingerprint standing for several runs of one configuration: the most common one (None without any)."""

    fingerprint: Fingerprint | None
    runs: int
    """Fingerprints it was chosen from."""
    variants: int
    """Distinct fingerprints (outside `RUN_DEPENDENT_FIELDS`) those runs gave: more than one is worth a note."""


def consensus(prints: list[Fingerprint]) -> Consensus:
    """The fingerprint standing for ``prints``, with the run-dependent fields pooled over those that agree. The CI
    gate, ab and the report all pick with this (perfscope.check.structure.diff_sides)."""
    if not prints:
        return Consensus(fingerprint=None, runs=0, variants=0)

    def key(fp: Fingerprint) -> str:
        data = to_jsonable(fp)
        return json.dumps({k: v for k, v in data.items() if k not in RUN_DEPENDENT_FIELDS}, sort_keys=True)

    keys = [key(fp) for fp in prints]
    counts = Counter(keys)
    winner = counts.most_common(1)[0][0]
    agreeing = [fp for fp, k in zip(prints, keys, strict=True) if k == winner]
    chosen = copy.deepcopy(agreeing[0])
    launches = [fp.kernel_launches for fp in agreeing if fp.kernel_launches is not None]
    if launches:
        launch_keys = [json.dumps(kl, sort_keys=True) for kl in launches]
        common = Counter(launch_keys).most_common(1)[0][0]
        chosen.kernel_launches = dict(launches[launch_keys.index(common)])
        chosen.unavailable.pop("kernel_launches", None)
    peaks = sorted((fp.memory for fp in agreeing if fp.memory is not None), key=lambda m: m.bytes)
    if peaks:
        chosen.memory = copy.deepcopy(peaks[len(peaks) // 2])
    windows = [fp.window_syncs for fp in agreeing if fp.window_syncs is not None]
    if windows:
        sites: Counter[str] = Counter()
        for w in windows:
            sites.update(w.sites)
        chosen.window_syncs = WindowSyncs(steps=sum(w.steps for w in windows), sites=dict(sorted(sites.items())),
                                          source=windows[0].source + (f" (pooled over {len(windows)} runs)" if len(windows) > 1 else ""))
    return Consensus(fingerprint=chosen, runs=len(prints), variants=len(counts))

"""The structural gate: diff two fingerprints and name each change in words a user acts on.

    gates = parse_structure_gates("sync,flops:5%")
    diff = diff_sides(runs_consensus(baseline_runs), runs_consensus(current_runs), gates)
    [words(c.message) for c in diff.changes]   # "+1 host sync per step: aten::_local_scalar_dense (.item()) at m.py:42"
    diff.failed                            # the changes a chosen gate fails on

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from perfscope.results import Trial
from perfscope.results.fingerprint import Consensus, Fingerprint, consensus
from perfscope.results.messages import Message, msg
from perfscope.wording import words

KINDS: dict[str, str] = {
    "sync": "host↔device syncs per step (any new one; KIND:N tolerates N more)",
    "flops": "FLOPs per step (any rise; flops:5% tolerates +5%)",
    "dtype": "low-precision (bf16/fp16) share of matmul FLOPs (any fall; dtype:10% tolerates 10 points)",
    "graph-breaks": "torch.compile graph breaks (any new one; graph-breaks:N tolerates N more)",
    "recompiles": "torch.compile recompiles (any new one)",
    "ops": "op calls (and CUDA kernel launches) per step (any rise; ops:10% or ops:20 tolerate that much)",
    "copies": "host↔device copies per step (a new copy or more bytes; copies:10% tolerates +10% bytes)",
    "memory": "CUDA allocator peak (a rise beyond its recorded tolerance, or beyond memory:5%)",
}


@dataclass(frozen=True)
class StructureGate:
    """Fail on one kind of change beyond a threshold: ``relative`` (0.05 = 5%) or an absolute count."""

    kind: str
    threshold: float = 0.0
    relative: bool = False

    def __str__(self) -> str:
        if not self.threshold:
            return self.kind
        return f"{self.kind}:{self.threshold:.0%}" if self.relative else f"{self.kind}:{self.threshold:g}"

    def exceeded(self, before: float, after: float) -> bool:
        """``after`` is worse than ``before`` by more than the threshold (a rise; callers flip falls)."""
        rise = after - before
        if self.relative:
            return rise > self.threshold * abs(before) if before else rise > 0
        return rise > self.threshold


def parse_structure_gates(text: str) -> tuple[StructureGate, ...]:
    """"sync,flops:5%,ops:20" -> gates; raises ValueError naming the known kinds."""
    gates: list[StructureGate] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        kind, _, amount = part.partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise ValueError(f"unknown structural kind {kind!r}; choose from {', '.join(KINDS)}")
        amount = amount.strip()
        if not amount:
            gates.append(StructureGate(kind))
            continue
        relative = amount.endswith("%")
        try:
            value = float(amount[:-1]) / 100 if relative else float(amount)
        except ValueError:
            raise ValueError(f"{part!r}: the threshold must be a number or a percentage (e.g. {kind}:5%)") from None
        if value < 0:
            raise ValueError(f"{part!r}: the threshold must not be negative")
        gates.append(StructureGate(kind, value, relative))
    if not gates:
        raise ValueError(f"no structural kind given; choose from {', '.join(KINDS)}")
    return tuple(gates)


class NoteCode(str, Enum):
    """What a structural note says, for code to act on: its words may change, its code does not."""

    MOVED_SYNC_SITES = "moved-sync-sites"
    """As many syncs per step as before, at other call sites."""
    NOT_COMPILED = "not-compiled"
    """One side is not compiled: graph breaks and recompiles not compared."""
    NO_FINGERPRINT = "no-fingerprint"
    """A side has no fingerprint: nothing was compared."""
    MEMORY_NOT_GATED = "memory-not-gated"
    """A memory gate was asked for and a side has no allocator peak."""
    FINGERPRINTS_DIFFER = "fingerprints-differ"
    """A side's runs gave different fingerprints; the most common one is compared."""


NoteSide = Literal["baseline", "current", "both"]


@dataclass(frozen=True, kw_only=True)
class StructureNote:
    """One note of the structural diff: a code to branch on, the message to show, and the side it is about."""

    code: NoteCode
    message: Message
    side: NoteSide | None = None

    @property
    def text(self) -> str:
        return words(self.message)

    def __str__(self) -> str:
        return self.text


@dataclass(kw_only=True)
class StructuralChange:
    kind: str
    message: Message
    before: float
    after: float
    worse: bool
    """The direction a regression takes (a new sync, more FLOPs, less bf16, ...); improvements are named too."""
    failed: bool = False
    """A chosen gate fails on this change."""


@dataclass(kw_only=True)
class StructureDiff:
    """Every structural change between the baseline's fingerprint and the current one."""

    changes: list[StructuralChange] = field(default_factory=list)
    notes: list[StructureNote] = field(default_factory=list)
    """How the comparison was made (fields one side lacks, runs whose fingerprints disagree, moved sync sites)."""
    gates: tuple[StructureGate, ...] = ()
    compared: bool = True
    """False when a side has no fingerprint: nothing was compared."""

    @property
    def failed(self) -> list[StructuralChange]:
        return [c for c in self.changes if c.failed]

    def summary(self) -> Message:
        """One line for a timing verdict's message: the structural explanation, or that none was found."""
        if not self.compared:
            return msg("structure_not_compared", notes=[n.message for n in self.notes])
        worse = [c.message for c in self.changes if c.worse]
        return msg("structural_changes", changes=worse) if worse else msg("no_structural_change_found")


def _syncs(base: Fingerprint, cur: Fingerprint) -> tuple[list[StructuralChange], list[StructureNote]]:
    changes: list[StructuralChange] = []
    notes: list[StructureNote] = []
    ops = sorted({s.op for s in base.syncs} | {s.op for s in cur.syncs})
    for op in ops:
        before = {s.site: s.count for s in base.syncs if s.op == op}
        after = {s.site: s.count for s in cur.syncs if s.op == op}
        b, a = sum(before.values()), sum(after.values())
        if a == b:
            if before != after:
                notes.append(StructureNote(code=NoteCode.MOVED_SYNC_SITES, side="both",
                                           message=msg("moved_sync_sites", op=op, count=a, sites=sorted(after))))
            continue
        sites = sorted((site for site in after if after[site] > before.get(site, 0)), key=lambda s: (-after[s], s))
        if a < b:
            sites = sorted((site for site in before if before[site] > after.get(site, 0)), key=lambda s: (-before[s], s))
        changes.append(StructuralChange(kind="sync", before=b, after=a, worse=a > b,
                                        message=msg("structure_syncs", op=op, sites=sites, before=b, after=a)))
    return changes, notes


def _window_syncs(base: Fingerprint, cur: Fingerprint, named: set[str]) -> list[StructuralChange]:
    """Syncs over the whole timed window (CUDA), by site, as rates per step: the syncs every N steps the one
    counted step misses. Windows differ in length and phase, so a periodic sync's rate moves by up to one
    occurrence per window between identical runs: only a larger move is a change. Sites the counted step
    already named are not named again."""
    b, c = base.window_syncs, cur.window_syncs
    if b is None or c is None or not b.steps or not c.steps:
        return []
    resolution = 1 / b.steps + 1 / c.steps
    changes = []
    for site in sorted(set(b.sites) | set(c.sites)):
        before, after = b.per_step(site), c.per_step(site)
        if site in named or abs(after - before) <= resolution:
            continue
        counts = [[b.sites.get(site, 0), b.steps], [c.sites.get(site, 0), c.steps]]
        changes.append(StructuralChange(kind="sync", before=before, after=after, worse=after > before, message=msg(
            "structure_window_syncs", site=site, before=before, after=after, counts=counts)))
    return changes


def _flops(base: Fingerprint, cur: Fingerprint) -> list[StructuralChange]:
    if base.flops == cur.flops and base.flops_by_op == cur.flops_by_op:
        return []
    delta = {op: cur.flops_by_op.get(op, 0.0) - base.flops_by_op.get(op, 0.0)
             for op in set(base.flops_by_op) | set(cur.flops_by_op)}
    by_op = {op: (d / base.flops_by_op[op] if base.flops_by_op.get(op) else float("inf")) for op, d in delta.items() if d}
    return [StructuralChange(kind="flops", before=base.flops, after=cur.flops, worse=cur.flops > base.flops,
                             message=msg("structure_flops", before=base.flops, after=cur.flops, by_op=by_op))]


def _low_precision_share(fp: Fingerprint) -> float:
    shares = fp.matmul_dtype_shares()
    return shares.get("bf16", 0.0) + shares.get("fp16", 0.0)


def _dtypes(base: Fingerprint, cur: Fingerprint) -> list[StructuralChange]:
    """One change for the whole mix, worded from the low-precision side: "matmul FLOPs in bf16 100% → 90% (fp32 0% → 10%)"."""
    before, after = base.matmul_dtype_shares(), cur.matmul_dtype_shares()
    moved = [d for d in sorted(set(before) | set(after)) if abs(after.get(d, 0.0) - before.get(d, 0.0)) >= 1e-9]
    if not before or not after or not moved:
        return []
    moved.sort(key=lambda d: (d not in ("bf16", "fp16"), d))
    low_before, low_after = _low_precision_share(base), _low_precision_share(cur)
    return [StructuralChange(kind="dtype", before=low_before, after=low_after, worse=low_after < low_before - 1e-9,
                             message=msg("structure_dtypes", before=before, after=after, moved=moved))]


def _compile(base: Fingerprint, cur: Fingerprint) -> tuple[list[StructuralChange], list[StructureNote]]:
    if base.compile is None and cur.compile is None:
        return [], []
    if base.compile is None or cur.compile is None:
        side: NoteSide = "baseline" if base.compile is None else "current"
        return [], [StructureNote(code=NoteCode.NOT_COMPILED, side=side, message=msg("side_not_compiled", side=side))]
    b, c = base.compile, cur.compile
    changes = []
    if c.graph_breaks != b.graph_breaks or c.break_reasons != b.break_reasons:
        new = {r: n - b.break_reasons.get(r, 0) for r, n in c.break_reasons.items() if n > b.break_reasons.get(r, 0)}
        changes.append(StructuralChange(
            kind="graph-breaks", before=b.graph_breaks, after=c.graph_breaks, worse=c.graph_breaks > b.graph_breaks,
            message=msg("structure_graph_breaks", before=b.graph_breaks, after=c.graph_breaks, reasons=new,
                        graphs=[b.graphs, c.graphs])))
    if c.recompiles != b.recompiles:
        changes.append(StructuralChange(kind="recompiles", before=b.recompiles, after=c.recompiles,
                                        worse=c.recompiles > b.recompiles,
                                        message=msg("structure_recompiles", before=b.recompiles, after=c.recompiles)))
    return changes, []


def _ops(base: Fingerprint, cur: Fingerprint) -> list[StructuralChange]:
    """Op calls per step; the calls a new sync made are named once, as the sync (not again as an op)."""
    changes = []
    delta = Counter(cur.ops)
    delta.subtract(base.ops)
    for fp, sign in ((cur, -1), (base, 1)):
        for sync in fp.syncs:
            delta[sync.op.split(" ")[0]] += sign * sync.count
    rise = sum(delta.values())
    if any(delta.values()):
        changes.append(StructuralChange(
            kind="ops", before=base.op_calls, after=base.op_calls + rise, worse=rise > 0,
            message=msg("structure_op_calls", before=base.op_calls, after=cur.op_calls,
                        delta={op: n for op, n in delta.items() if n})))
    if base.kernel_launches and cur.kernel_launches:
        for name in sorted(set(base.kernel_launches) | set(cur.kernel_launches)):
            b, a = base.kernel_launches.get(name, 0), cur.kernel_launches.get(name, 0)
            if a != b:
                changes.append(StructuralChange(kind="ops", before=b, after=a, worse=a > b,
                                                message=msg("structure_launches", name=name, before=b, after=a)))
    return changes


def _copies(base: Fingerprint, cur: Fingerprint) -> list[StructuralChange]:
    changes = []
    for kind in sorted(set(base.copies) | set(cur.copies)):
        b, a = base.copies.get(kind), cur.copies.get(kind)
        bc, bb = (b.count, b.bytes) if b else (0, 0)
        ac, ab = (a.count, a.bytes) if a else (0, 0)
        if (bc, bb) == (ac, ab):
            continue
        changes.append(StructuralChange(
            kind="copies", before=bb, after=ab, worse=ac > bc or ab > bb,
            message=msg("structure_copies", kind=kind, counts=[bc, ac], sizes=[bb, ab])))
    return changes


def _memory(base: Fingerprint, cur: Fingerprint) -> list[StructuralChange]:
    if base.memory is None or cur.memory is None or not base.memory.bytes:
        return []
    b, a = base.memory.bytes, cur.memory.bytes
    tolerance = max(base.memory.tolerance, cur.memory.tolerance)
    if abs(a - b) <= tolerance * b:
        return []
    return [StructuralChange(kind="memory", before=b, after=a, worse=a > b,
                             message=msg("structure_memory", before=b, after=a, tolerance=tolerance))]


def _fails(change: StructuralChange, gate: StructureGate) -> bool:
    """Worse, and by more than the gate tolerates. dtype thresholds are share points (dtype:10% = 10 points)."""
    if not change.worse:
        return False
    if change.kind == "dtype":
        return change.before - change.after > gate.threshold + 1e-9
    if change.kind == "copies" and not gate.threshold:
        return True  # a new copy, or more bytes
    return gate.exceeded(change.before, change.after)


def diff_fingerprints(base: Fingerprint | None, cur: Fingerprint | None,
                      gates: tuple[StructureGate, ...] = ()) -> StructureDiff:
    """Every change from ``base`` to ``cur``, each marked failed when a gate of its kind is exceeded."""
    diff = StructureDiff(gates=gates)
    if base is None or cur is None:
        diff.compared = False
        missing: NoteSide = "both" if base is None and cur is None else "baseline" if base is None else "current"
        diff.notes.append(StructureNote(code=NoteCode.NO_FINGERPRINT, side=missing,
                                        message=msg("no_fingerprint", side="baseline" if base is None else "current")))
        return diff
    sync_changes, sync_notes = _syncs(base, cur)
    named = {s.site for s in [*base.syncs, *cur.syncs]}
    sync_changes += _window_syncs(base, cur, named)
    compile_changes, compile_notes = _compile(base, cur)
    diff.changes = [*sync_changes, *compile_changes, *_flops(base, cur), *_dtypes(base, cur), *_ops(base, cur),
                    *_copies(base, cur), *_memory(base, cur)]
    diff.notes += sync_notes + compile_notes
    by_kind = {g.kind: g for g in gates}
    for change in diff.changes:
        gate = by_kind.get(change.kind)
        change.failed = gate is not None and _fails(change, gate)
    if "memory" in by_kind and (base.memory is None or cur.memory is None):
        both = base.memory is None and cur.memory is None
        diff.notes.append(StructureNote(code=NoteCode.MEMORY_NOT_GATED, side="both" if both else "baseline" if base.memory is None else "current",
                                        message=msg("memory_not_gated", both=both)))
    return diff


def runs_consensus(runs: Iterable[Trial]) -> Consensus:
    """A side's fingerprint from its successful runs, contended ones included: a count does not depend on the load."""
    return consensus([t.metrics.fingerprint for t in runs if t.ok and t.metrics is not None and t.metrics.fingerprint is not None])


def diff_sides(base: Consensus, cur: Consensus, gates: tuple[StructureGate, ...] = (),
               names: tuple[str, str] = ("baseline", "current")) -> StructureDiff:
    """The one structural diff of two sides' runs, which the gate, ab and the report's knob rows render: their
    consensus fingerprints diffed, after a note for each side whose runs disagreed (``names``: how each is named)."""
    diff = diff_fingerprints(base.fingerprint, cur.fingerprint, gates)
    sides: tuple[NoteSide, NoteSide] = ("baseline", "current")
    diff.notes[:0] = [StructureNote(code=NoteCode.FINGERPRINTS_DIFFER, side=side, message=msg(
                          "fingerprints_differ", role=name, runs=c.runs, variants=c.variants))
                      for side, name, c in zip(sides, names, (base, cur), strict=True) if c.variants > 1]
    return diff

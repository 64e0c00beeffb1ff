"""The words of the structural diff (perfscope.wording's templates, split off to keep one concept a module): each
change between two fingerprints (StructuralChange.message, perfscope.check.structure), the diff's notes and its
one-line summary in a verdict, and what a knob changed in the step (perfscope.report.structure).

    words(msg("structure_recompiles", before=0, after=2))   # "recompiles 0 → 2"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def size(n: float) -> str:
    """Bytes in binary units ("1.5 MiB"): the structural diff's copies and allocator peak, and the knobs' notes."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _pct(before: float, after: float) -> str:
    return f"{(after - before) / before:+.0%}" if before else "new"


def _top(delta: dict[str, float], fmt: str = "{:+g}", n: int = 3) -> str:
    """The ``n`` largest moves by size, then how many more."""
    items = sorted(((k, v) for k, v in delta.items() if v), key=lambda kv: (-abs(kv[1]), kv[0]))
    shown = ", ".join(f"{k} {fmt.format(v)}" for k, v in items[:n])
    return shown + (f", {len(items) - n} more" if len(items) > n else "")


def _syncs(*, op: str, sites: list[str], before: int, after: int) -> str:
    noun = "host sync" if abs(after - before) == 1 else "host syncs"
    return f"{after - before:+d} {noun} per step: {op} at {', '.join(sites) or 'an unknown site'} ({before} → {after})"


def _window_syncs(*, site: str, before: float, after: float, counts: list[list[int]]) -> str:
    """``counts``: [syncs, steps] of the baseline's window, then the current one's."""
    every = f" (about 1 every {1 / (after - before):.0f} steps)" if after - before > 0 else ""
    (b, b_steps), (c, c_steps) = counts
    return (f"{after - before:+.2g} host syncs per step over the timed window{every}: a synchronizing CUDA call at "
            f"{site or 'an unknown site'} ({b} in {b_steps} steps → {c} in {c_steps} steps)")


def _dtypes(*, before: dict[str, float], after: dict[str, float], moved: list[str]) -> str:
    parts = [f"{d} {before.get(d, 0.0):.0%} → {after.get(d, 0.0):.0%}" for d in moved]
    return f"matmul FLOPs in {parts[0]}" + (f" ({', '.join(parts[1:])})" if parts[1:] else "")


def _graph_breaks(*, before: int, after: int, reasons: dict[str, int], graphs: list[int]) -> str:
    """``reasons``: the new breaks' reasons and counts; ``graphs``: graphs compiled before, after."""
    said = "; ".join(r + (f" ×{n}" if n > 1 else "") for r, n in sorted(reasons.items()))
    return (f"graph breaks {before} → {after}" + (f" (reason: {said})" if said else "")
            + (f", graphs {graphs[0]} → {graphs[1]}" if graphs[0] != graphs[1] else ""))


def _copies(*, kind: str, counts: list[int], sizes: list[int]) -> str:
    """``counts`` and ``sizes`` (bytes): the baseline's, then the current one's."""
    return (f"{kind.replace('h2d', 'H2D').replace('d2h', 'D2H')} copies per step {counts[0]} → {counts[1]} "
            f"({size(sizes[0])} → {size(sizes[1])})")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _compile_facts(*, graphs: int, graph_breaks: int, reasons: list[str], recompiles: int) -> str:
    said = "; ".join(reasons)
    breaks = _plural(graph_breaks, "graph break") + (f" (reason: {said})" if said else "")
    return f"torch.compile: {_plural(graphs, 'graph')}, {breaks}, {_plural(recompiles, 'recompile')}"


STRUCTURE: dict[str, str | Callable[..., Any]] = {
    # a structural change (StructuralChange.message; perfscope.check.structure)
    "structure_syncs": _syncs,
    "structure_window_syncs": _window_syncs,
    "structure_flops": lambda *, before, after, by_op: (
        f"FLOPs per step {_pct(before, after)} ({_top(by_op, fmt='{:+.0%}')}): {before:.4g} → {after:.4g}"),
    "structure_dtypes": _dtypes,
    "structure_graph_breaks": _graph_breaks,
    "structure_recompiles": "recompiles {before} → {after}",
    "structure_op_calls": lambda *, before, after, delta: f"op calls per step {before} → {after} ({_top(delta)})",
    "structure_launches": lambda *, name, before, after: (
        f"{'kernel launches' if name == 'compute kernels' else name} per step {before} → {after}"),
    "structure_copies": _copies,
    "structure_memory": lambda *, before, after, tolerance: (
        f"allocator peak {size(before)} → {size(after)} ({_pct(before, after)}, beyond its ±{tolerance:.0%} "
        "run-to-run tolerance)"),
    # the diff in one line, for a timing verdict (StructureDiff.summary)
    "structure_not_compared": lambda *, notes: f"structure not compared ({'; '.join(notes)})",
    "no_structural_change_found": ("no structural change found (syncs, FLOPs, dtypes, compile, op calls, copies and "
                                   "memory as in the baseline): look at the data path, the trace or the machine"),
    "structural_changes": lambda *, changes: "structural changes: " + "; ".join(changes),
    # the structural diff's notes (perfscope.check.structure.StructureNote)
    "moved_sync_sites": lambda *, op, count, sites: f"{op}: {count} per step as before, at moved call sites ({', '.join(sites)})",
    "side_not_compiled": lambda *, side: (f"the {'baseline' if side == 'baseline' else 'current run'} is not compiled: "
                                          "graph breaks and recompiles not compared"),
    "no_fingerprint": lambda *, side: (f"{'the baseline' if side == 'baseline' else 'the current run'} has no structural "
                                       "fingerprint (recorded by an older perfscope, or counting failed)"),
    "memory_not_gated": lambda *, both: (f"memory: no allocator peak on {'both sides' if both else 'one side'} "
                                         "(CUDA only): not gated"),
    "fingerprints_differ": ("{role}: the structural fingerprints of its {runs} runs differ ({variants} variants): the "
                            "most common one is compared"),
    # what a knob changed in the step, and its notes (perfscope.report.structure.StructuralEffect)
    "compile_facts": _compile_facts,
    "data_wait_moved": "exposed data wait {before:.0%} → {after:.0%} of wall time",
    "measured_change": "{change} (measured)",
    "no_structural_change_counted": ("no structural change counted (same syncs, FLOPs, dtypes, op calls and copies as "
                                     "the baseline)"),
    "configuration_no_fingerprint": lambda *, name, baseline: (
        f"{f'the baseline ({name})' if baseline else name} has no structural fingerprint (recorded by an older perfscope, "
        "or counting failed)"),
    "eager_op_count": ("op calls are counted on the eager step (torch.compile does not trace under the counting "
                       "dispatch mode); what compiling removed shows as kernel launches of traced CUDA runs"),
    "per_step_batch_differs": ("per step of {batch} samples against the baseline's {baseline}: per-step counts scale "
                               "with the batch"),
}

"""Small formatting helpers shared by the rules' evidence lines, and the label every finding from a trace the user
brought carries (Results.source "trace": nothing was measured, so each finding is a diagnosis or an estimate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfscope.results import MEMORY_CATEGORY_NAMES

if TYPE_CHECKING:
    from perfscope.results import Finding, MemoryCategories


def pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.1%}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def size(n: float) -> str:
    return gib(n) if n >= 2**30 else mib(n)


def held_at_peak(held: MemoryCategories | None, category: str) -> str | None:
    """The evidence line for ``category``'s measured share of the peak (torch.profiler's memory categories), or None
    when the run was not profiled by category: a rule then says only what the owner counts back."""
    share = held.share(category) if held is not None else None
    if held is None or share is None:
        return None
    name, top = (f"{MEMORY_CATEGORY_NAMES.get(c, c)} {'holds' if c in ('optimizer_state', 'autograd_detail') else 'hold'}"
                 for c in (category, held.peak_category))
    most = "the most of any category" if held.peak_category == category else f"{top} the most"
    return (f"{name} {pct(share)} of a profiled step's {size(held.peak_bytes)} peak on {held.device}, {most} "
            "(torch.profiler memory categories)")


TRACE_ESTIMATE = "nothing was measured: this is an estimate from the trace (no rerun)"


def label_trace_estimates(findings: list[Finding]) -> list[Finding]:
    """Every finding that carries no measured gain, labelled as an estimate from the trace (evidence first line)."""
    for f in findings:
        if f.gain is None and TRACE_ESTIMATE not in f.evidence:
            f.evidence.insert(0, TRACE_ESTIMATE)
            if f.estimate_method:
                f.estimate_method = f"{f.estimate_method} (from the trace alone: nothing was measured)"
    return findings

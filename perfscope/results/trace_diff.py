"""Where the time went between two runs: two runs' trace facts side by side, per step.

    diff = diff_facts(baseline.metrics.trace_facts, recommended.metrics.trace_facts)   # two TraceFacts
    diff.kernel_time_by_category["gemm"].delta      # seconds per step, other − baseline (biggest category first)
    diff.scalars.get("gpu_idle_fraction")           # a Change, or None when either trace lacks the fact

A pure function of two typed results (perfscope.results.trace_facts), so it lives with them: the report
(perfscope.report.tables, "Where the time went") reads it without importing the trace layer that wrote the facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfscope.results.trace_facts import TraceFacts

__all__ = ["SCALARS", "Change", "TraceDiff", "diff_facts"]

SCALARS: dict[str, Callable[[TraceFacts], float | None]] = {
    "step_time_s": lambda f: f.step_time_s,
    "gpu_idle_fraction": lambda f: f.gpu.idle_fraction if f.gpu else None,
    "kernel_count_per_step": lambda f: f.launch.kernels_per_step,
    "data_wait_fraction": lambda f: f.data_wait_fraction,
    "sync_fraction": lambda f: f.sync.blocked_fraction,
    "fp32_matmul_fraction": lambda f: f.kernels.fp32_gemm_fraction,
}
"""The scalar facts compared, by name: how each is read from one trace's facts (None: that trace lacks it)."""


@dataclass(frozen=True, kw_only=True)
class Change:
    """One figure in both traces."""

    baseline: float
    other: float

    @property
    def delta(self) -> float:
        """other − baseline."""
        return self.other - self.baseline


@dataclass(frozen=True, kw_only=True)
class TraceDiff:
    kernel_time_by_category: dict[str, Change]
    """Seconds per step by kernel category (perfscope.trace.categories), the largest in either trace first; a
    category one trace lacks counts 0 there."""
    scalars: dict[str, Change]
    """The SCALARS both traces have, by name."""


def diff_facts(baseline: TraceFacts, other: TraceFacts) -> TraceDiff:
    """Per-step seconds by kernel category and the scalar facts of two traces, with their deltas."""
    base_cats = baseline.kernels.time_by_category
    other_cats = other.kernels.time_by_category
    categories = sorted(set(base_cats) | set(other_cats), key=lambda c: -max(base_cats.get(c, 0.0), other_cats.get(c, 0.0)))
    scalars = {}
    for key, read in SCALARS.items():
        a, b = read(baseline), read(other)
        if a is not None and b is not None:
            scalars[key] = Change(baseline=a, other=b)
    return TraceDiff(
        kernel_time_by_category={c: Change(baseline=base_cats.get(c, 0.0), other=other_cats.get(c, 0.0)) for c in categories},
        scalars=scalars,
    )

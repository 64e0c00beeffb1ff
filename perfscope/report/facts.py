"""The report's readers of ``TrialMetrics.trace_facts`` (perfscope.results.trace_facts.TraceFacts).

    >>> kernel_time_by_category(trial.metrics.trace_facts)      # {} when the trial has no trace
    {'gemm': 0.0198, 'elementwise': 0.00115, ...}

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results.constraints import finite
from perfscope.results.trace_facts import TraceFacts


@dataclass(kw_only=True, slots=True)
class KernelFact:
    name: str
    time_s: float
    count: float | None
    """Launches per step."""


def _fraction(value: float | None) -> float | None:
    value = finite(value)
    return None if value is None else min(max(value, 0.0), 1.0)


def idle_fraction(facts: TraceFacts | None) -> float | None:
    """Share of the step the device sat idle, per the trace (None on CPU or without a trace)."""
    return _fraction(facts.gpu.idle_fraction) if facts is not None and facts.gpu is not None else None


def sync_fraction(facts: TraceFacts | None) -> float | None:
    """Share of the step the host blocked on device synchronization, per the trace."""
    return _fraction(facts.sync.blocked_fraction) if facts is not None else None


def kernel_time_by_category(facts: TraceFacts | None) -> dict[str, float]:
    """{category: seconds per step}, dropping entries that are not finite non-negative numbers."""
    if facts is None:
        return {}
    return {str(k): s for k, v in facts.kernels.time_by_category.items() if (s := finite(v)) is not None and s >= 0}


def top_kernels(facts: TraceFacts | None) -> list[KernelFact]:
    """The longest kernels (CPU: aten ops) per step, longest first; rows without a finite time are skipped."""
    if facts is None:
        return []
    rows = [
        KernelFact(name=k.name, time_s=seconds, count=finite(k.count))
        for k in facts.kernels.top
        if (seconds := finite(k.time_s)) is not None
    ]
    return sorted(rows, key=lambda k: k.time_s, reverse=True)

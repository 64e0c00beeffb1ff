"""Defensive readers for ``TrialMetrics.trace_facts``, a free-form dict written by perfscope.trace.

    >>> kernel_time_by_category({"kernel_time_by_category": {"gemm": 0.8, "bad": "x"}})
    {'gemm': 0.8}

Why defensive: trace facts grow with the trace analyses and old results files keep old keys, so a
missing, renamed or mistyped key must drop that part of the report, never fail the whole render.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Accepted spellings, first match wins; keep in step with perfscope/trace/.
IDLE_FRACTION_KEYS = ("gpu_idle_fraction", "idle_fraction", "device_idle_fraction")
SYNC_FRACTION_KEYS = ("sync_fraction", "host_sync_fraction", "cpu_gpu_sync_fraction")


@dataclass(kw_only=True, slots=True)
class KernelFact:
    name: str
    time_s: float
    count: int | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _fraction(facts: dict[str, Any] | None, keys: tuple[str, ...]) -> float | None:
    if not isinstance(facts, dict):
        return None
    for key in keys:
        value = _number(facts.get(key))
        if value is not None:
            return min(max(value, 0.0), 1.0)
    return None


def idle_fraction(facts: dict[str, Any] | None) -> float | None:
    """Share of the step the device sat idle, per the trace."""
    return _fraction(facts, IDLE_FRACTION_KEYS)


def sync_fraction(facts: dict[str, Any] | None) -> float | None:
    """Share of the step the host blocked on device synchronization, per the trace."""
    return _fraction(facts, SYNC_FRACTION_KEYS)


def kernel_time_by_category(facts: dict[str, Any] | None) -> dict[str, float]:
    """{category: seconds}, dropping entries that are not finite non-negative numbers."""
    raw = facts.get("kernel_time_by_category") if isinstance(facts, dict) else None
    if not isinstance(raw, dict):
        return {}
    out = {}
    for key, value in raw.items():
        seconds = _number(value)
        if seconds is not None and seconds >= 0:
            out[str(key)] = seconds
    return out


def top_kernels(facts: dict[str, Any] | None) -> list[KernelFact]:
    """[{"name", "time_s", "count"}] rows, longest first; malformed rows are skipped."""
    raw = facts.get("top_kernels") if isinstance(facts, dict) else None
    if not isinstance(raw, list):
        return []
    rows = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        time_s = _number(item.get("time_s"))
        if time_s is None or "name" not in item:
            continue
        count = item.get("count")
        rows.append(
            KernelFact(
                name=str(item["name"]),
                time_s=time_s,
                count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            )
        )
    return sorted(rows, key=lambda k: k.time_s, reverse=True)

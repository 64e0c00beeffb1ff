"""Where the time went: baseline vs recommended trace facts, side by side.

    diff = diff_facts(baseline_facts, recommended_facts)      # two TraceFacts
    diff["kernel_time_by_category"]["gemm"]   # {"baseline": s, "other": s, "delta": s} per step
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.results.trace_facts import TraceFacts

SCALARS: dict[str, Callable[[TraceFacts], float | None]] = {
    "step_time_s": lambda f: f.step_time_s,
    "gpu_idle_fraction": lambda f: f.gpu.idle_fraction if f.gpu else None,
    "kernel_count_per_step": lambda f: f.launch.kernels_per_step,
    "data_wait_fraction": lambda f: f.data_wait_fraction,
    "sync_fraction": lambda f: f.sync.blocked_fraction,
    "fp32_matmul_fraction": lambda f: f.kernels.fp32_gemm_fraction,
}


def diff_facts(baseline: TraceFacts, other: TraceFacts) -> dict[str, Any]:
    """Per-step seconds by kernel category and the scalar facts of two traces, with their deltas."""
    base_cats = baseline.kernels.time_by_category
    other_cats = other.kernels.time_by_category
    categories = sorted(set(base_cats) | set(other_cats), key=lambda c: -max(base_cats.get(c, 0.0), other_cats.get(c, 0.0)))
    out: dict[str, Any] = {
        "kernel_time_by_category": {
            c: {"baseline": base_cats.get(c, 0.0), "other": other_cats.get(c, 0.0), "delta": other_cats.get(c, 0.0) - base_cats.get(c, 0.0)}
            for c in categories
        }
    }
    for key, read in SCALARS.items():
        a, b = read(baseline), read(other)
        if a is not None and b is not None:
            out[key] = {"baseline": a, "other": b, "delta": b - a}
    return out


def diff_markdown(diff: dict[str, Any], other_name: str = "recommended") -> str:
    lines = [f"| kernel category | baseline ms/step | {other_name} ms/step | change |", "| --- | ---: | ---: | ---: |"]
    for category, row in diff["kernel_time_by_category"].items():
        lines.append(f"| {category} | {row['baseline'] * 1e3:.2f} | {row['other'] * 1e3:.2f} | {row['delta'] * 1e3:+.2f} |")
    for key in SCALARS:
        if key in diff:
            row = diff[key]
            lines.append(f"| {key} | {row['baseline']:.4g} | {row['other']:.4g} | {row['delta']:+.4g} |")
    return "\n".join(lines)

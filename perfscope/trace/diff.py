"""Where the time went: baseline vs recommended trace facts, side by side.

    diff = diff_facts(baseline_facts, recommended_facts)
    diff["kernel_time_by_category"]["gemm"]   # {"baseline": s, "other": s, "delta": s} per step
"""

from __future__ import annotations

from typing import Any

SCALARS = ("step_time_s", "gpu_idle_fraction", "kernel_count_per_step", "data_wait_fraction", "sync_fraction", "fp32_matmul_fraction")


def diff_facts(baseline: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Per-step seconds by kernel category and the scalar facts of two traces, with their deltas."""
    base_cats = baseline.get("kernel_time_by_category") or {}
    other_cats = other.get("kernel_time_by_category") or {}
    categories = sorted(set(base_cats) | set(other_cats), key=lambda c: -max(base_cats.get(c, 0.0), other_cats.get(c, 0.0)))
    out: dict[str, Any] = {
        "kernel_time_by_category": {
            c: {"baseline": base_cats.get(c, 0.0), "other": other_cats.get(c, 0.0), "delta": other_cats.get(c, 0.0) - base_cats.get(c, 0.0)}
            for c in categories
        }
    }
    for key in SCALARS:
        a, b = baseline.get(key), other.get(key)
        if isinstance(a, int | float) and isinstance(b, int | float):
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

"""Where one run's step time goes, in slices a finding can point at.

    slices = step_breakdown(trial.metrics)        # [StepSlice(key="data_wait", seconds=0.097, share=0.97), ...]
    addressed(slices, finding.addresses)          # the slices a finding's fix acts on

Design notes: docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfscope.results.model import TrialMetrics
from perfscope.results.trace_facts import TraceFacts

SLICES: dict[str, str] = {
    "data_wait": "data wait",
    "launch": "launch overhead (device idle while the host launches)",
    "sync": "sync (device idle while the host waits on it)",
    "idle": "other device idle",
    "host": "host overhead (Python, dispatch)",
    "gemm": "matmul",
    "conv": "convolution",
    "attention": "attention",
    "elementwise": "elementwise",
    "normalization": "normalization",
    "embedding": "embedding lookups",
    "optimizer": "optimizer",
    "memcpy": "copies",
    "memset": "memset",
    "communication": "communication",
    "other": "other ops",
    "compute": "compute & other",
}
"""Slice key -> label: the vocabulary of `Finding.addresses` and of the breakdown chart."""
COMPUTE = frozenset({"gemm", "conv", "attention", "elementwise", "embedding", "normalization", "optimizer", "memcpy", "memset",
                     "communication", "other", "host", "launch"})
"""Keys that are part of "compute & other" when no trace split it."""
MIN_SHARE = 0.01
"""Slices below this share of the step are folded into "other ops"."""
WHOLE_STEP = "step"
"""A fix that acts on every slice (e.g. a larger micro-batch: each sample's share of every cost)."""


@dataclass(frozen=True, kw_only=True)
class StepSlice:
    key: str
    seconds: float
    """Seconds per step."""
    share: float
    """seconds / the step."""

    @property
    def label(self) -> str:
        return SLICES.get(self.key, self.key)


def _finite(x: float | None) -> float:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) and x > 0 else 0.0


def _split(total_s: float, weights: dict[str, float]) -> dict[str, float]:
    """``total_s`` split in proportion to ``weights`` (all dropped when they sum to nothing)."""
    weights = {k: _finite(v) for k, v in weights.items()}
    norm = sum(weights.values())
    return {k: total_s * v / norm for k, v in weights.items() if v > 0} if norm > 0 and total_s > 0 else {}


def _rest(rest_s: float, facts: TraceFacts | None) -> dict[str, float]:
    """The step minus its data wait, in the trace's proportions (one "compute" slice without a trace)."""
    if facts is None or rest_s <= 0:
        return {"compute": rest_s} if rest_s > 0 else {}
    categories = {k: _finite(v) for k, v in facts.kernels.time_by_category.items()}
    trace_step = _finite(facts.step_time_s)
    if facts.gpu is not None and trace_step > 0:
        idle = facts.gpu.idle
        parts = {"launch": idle.host_s, "sync": idle.sync_s, "idle": idle.other_s, "busy": facts.gpu.busy_s}
        split = _split(rest_s, parts)
        busy = split.pop("busy", 0.0)
        compute = _split(busy, categories) or ({"compute": busy} if busy else {})
        return {**compute, **split}
    ops = sum(categories.values())
    compute_in_trace = trace_step * (1.0 - min(max(_finite(facts.data_wait_fraction), 0.0), 1.0))
    if ops <= 0 or compute_in_trace <= 0:
        return {"compute": rest_s}
    covered = min(ops / compute_in_trace, 1.0)  # op self time; the rest of the step is the host's own overhead
    out = _split(rest_s * covered, categories)
    if covered < 1.0:
        out["host"] = rest_s * (1.0 - covered)
    return out


def step_breakdown(metrics: TrialMetrics) -> list[StepSlice]:
    """The run's step split into slices, largest first after the data wait; [] without a step time."""
    step = metrics.mean_step_time_s
    if not math.isfinite(step) or step <= 0:
        return []
    wait = step * min(max(metrics.data_wait_share, 0.0), 1.0)
    parts = {"data_wait": wait} if wait > 0 else {}
    rest = _rest(step - wait, metrics.trace_facts)
    tiny = [k for k, v in rest.items() if v < MIN_SHARE * step and k not in ("other", "compute")]
    for k in tiny:  # slivers read as noise in a chart: they join "other ops"
        rest["other"] = rest.get("other", 0.0) + rest.pop(k)
    parts.update(sorted(rest.items(), key=lambda kv: -kv[1]))
    return [StepSlice(key=k, seconds=v, share=v / step) for k, v in parts.items() if v > 0]


def addressed(slices: list[StepSlice], keys: list[str]) -> list[StepSlice]:
    """The slices a finding addresses: its keys, "compute & other" for compute keys the breakdown did not split
    out, every slice for WHOLE_STEP; [] when it addresses none of this step's time (memory, numerics)."""
    if WHOLE_STEP in keys:
        return list(slices)
    present = {s.key: s for s in slices}
    hit = [present[k] for k in keys if k in present]
    if not hit and "compute" in present and any(k in COMPUTE for k in keys):
        hit = [present["compute"]]
    return hit

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


def positive(x: object) -> float:
    """``x`` as a float when it is a positive finite number, else 0."""
    return float(x) if isinstance(x, int | float) and math.isfinite(x) and x > 0 else 0.0


def _split(total_s: float, weights: dict[str, float]) -> dict[str, float]:
    """``total_s`` split in proportion to ``weights`` (all dropped when they sum to nothing)."""
    weights = {k: positive(v) for k, v in weights.items()}
    norm = sum(weights.values())
    return {k: total_s * v / norm for k, v in weights.items() if v > 0} if norm > 0 and total_s > 0 else {}


def trace_shares(facts: TraceFacts, exposed_s: float | None = None) -> dict[str, float]:
    """The trace's step less its data wait by slice, shares summing to 1 ({} when the trace has no time): on a GPU
    the device idle by what it waited for and its busy time by kernel category; on a CPU the aten ops' self time by
    category and the rest as host overhead. ``exposed_s``: the exposed collective time per trace step (a rank's
    trace), taken out of the busy time as "communication" instead of the collective kernels' own time."""
    categories = {k: positive(v) for k, v in facts.kernels.time_by_category.items()}
    step = positive(facts.step_time_s)
    if facts.gpu is not None and step > 0:
        idle = facts.gpu.idle
        out = {"launch": positive(idle.host_s), "sync": positive(idle.sync_s), "idle": positive(idle.other_s)}
        work = positive(facts.gpu.busy_s)
    else:
        in_step = step * (1.0 - min(positive(facts.data_wait_fraction), 1.0))
        if sum(categories.values()) <= 0 or in_step <= 0:
            return {"compute": 1.0} if step > 0 else {}
        work = min(sum(categories.values()), in_step)  # op self time; the rest of the step is the host's own overhead
        out = {"host": in_step - work}
    if exposed_s is not None:
        out["communication"] = min(positive(exposed_s), work)
        work -= out["communication"]
        categories.pop("communication", None)
    for k, v in (_split(work, categories) or {"compute": work}).items():
        out[k] = out.get(k, 0.0) + v
    total = sum(out.values())
    return {k: v / total for k, v in out.items()} if total > 0 else {}


def step_breakdown(metrics: TrialMetrics) -> list[StepSlice]:
    """The run's step split into slices, largest first after the data wait; [] without a step time."""
    step = metrics.mean_step_time_s
    if not math.isfinite(step) or step <= 0:
        return []
    wait = step * min(max(metrics.data_wait_share, 0.0), 1.0)
    parts = {"data_wait": wait} if wait > 0 else {}
    facts = metrics.trace_facts
    shares = (trace_shares(facts) if facts is not None else {}) or {"compute": 1.0}  # no trace: one "compute" slice
    rest = {k: (step - wait) * v for k, v in shares.items()}
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

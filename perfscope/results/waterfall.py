"""The MFU gap explained: from 100 % of the peak down to the measured MFU, each step a measured share of the step.

    wf = mfu_waterfall(results)                    # MfuWaterfall of the baseline run (None without a timed run)
    [(p.label, p.points) for p in wf.parts]        # [("data wait", 0.4), ..., ("other / unattributed", 0.0)]
    wf.end_points                                  # the measured MFU in points (or, without FLOPs, the matmul share)

Design notes: docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfscope.results.breakdown import positive, trace_shares
from perfscope.results.messages import Message, msg
from perfscope.results.model import Results, Trial, TrialMetrics
from perfscope.results.roles import baseline_run

__all__ = ["MATMUL", "NON_GEMM", "PARTS", "MfuWaterfall", "PartSpec", "WaterfallPart", "mfu_waterfall", "trial_waterfall"]

MATMUL = ("gemm", "conv", "attention")
"""Kernel categories whose FLOPs MFU counts (perfscope.trace.categories)."""
NON_GEMM = ("elementwise", "embedding", "normalization", "optimizer", "memcpy", "memset", "other")
_TIME = frozenset({"data_wait", "sync", "launch", "idle", "communication", "non_gemm", "unsplit"})
"""Parts that are time (seconds per step); the others are FLOPs at the peak, or the residual."""
TOLERANCE_POINTS = 2.0
"""|residual| beyond this is a contradiction between the sources, said in the notes."""


@dataclass(frozen=True, kw_only=True)
class PartSpec:
    """What a part is. What acts on it is derived by the report (perfscope.report.waterfall_chart.part_fixes):
    the rules and knobs whose `addresses` meet its `slices`, or that name it in their `gap_parts`."""

    label: str
    group: str
    slices: tuple[str, ...]
    """Keys of perfscope.results.breakdown.SLICES this part's time is (a finding's `addresses` act on it)."""
    no_fix: str = ""
    """Why nothing acts on it: a part no slice, rule or knob can reach."""


PARTS: dict[str, PartSpec] = {
    "data_wait": PartSpec(label="data wait", group="host idle", slices=("data_wait",)),
    "sync": PartSpec(label="sync (host waits on the device)", group="host idle", slices=("sync",)),
    "launch": PartSpec(label="launch & host overhead", group="host idle", slices=("launch", "host")),
    "idle": PartSpec(label="other device idle", group="host idle", slices=("idle",)),
    "communication": PartSpec(label="exposed communication", group="exposed communication", slices=("communication",)),
    "non_gemm": PartSpec(label="non-GEMM kernels", group="non-GEMM kernels", slices=NON_GEMM),
    "gemm": PartSpec(label="GEMM efficiency", group="GEMM efficiency", slices=MATMUL),
    "ceiling": PartSpec(label="measured matmul ceiling below the peak", group="GEMM efficiency", slices=(),
                        no_fix="the device's own best matmul stays below its datasheet peak here: no code change closes it"),
    "recompute": PartSpec(label="recompute (HFU − MFU)", group="recompute", slices=()),
    "padding": PartSpec(label="padding", group="padding", slices=(),
                        no_fix="not measured, so nothing to act on (see the part's reason)"),
    "unsplit": PartSpec(label="compute below peak, not split", group="not split", slices=("compute",),
                        no_fix="profile the run (no --no-trace) to split it into parts a fix acts on"),
    "residual": PartSpec(label="other / unattributed", group="residual", slices=(),
                         no_fix="belongs to no part: where the sources disagree, it shows here"),
}
"""Every part, in the chart's order."""
PART_OF = {key: part for part, spec in PARTS.items() for key in spec.slices}
"""The part each slice of the step breakdown is in (a kernel category no part names: "non_gemm")."""

PADDING_UNKNOWN = msg("padding_unknown")


@dataclass(frozen=True, kw_only=True)
class WaterfallPart:
    key: str
    points: float | None
    """Percentage points of the 100 % (None: unavailable, the reason in ``unavailable``)."""
    seconds: float | None = None
    """Seconds per step, for the time parts."""
    evidence: str = ""
    unavailable: Message | None = None
    name: str = ""
    """The label where the device words it differently (a CPU has no launches: "host overhead")."""

    @property
    def spec(self) -> PartSpec:
        return PARTS[self.key]

    @property
    def label(self) -> str:
        return self.name or self.spec.label


@dataclass(frozen=True, kw_only=True)
class MfuWaterfall:
    """100 % = Σ parts (residual included) + the end bar, in points."""

    trial: str
    basis: str
    """What 100 % is: "peak" (the MFU's denominator) or "step time" (no FLOPs: MFU unknown)."""
    denominator: Message
    """The 100 % in words (the peak and its source, or the step)."""
    step_s: float
    end_label: str
    end_points: float
    """The measured MFU in points; without FLOPs, the matmul-class share of the step."""
    parts: list[WaterfallPart] = field(default_factory=list)
    notes: list[Message] = field(default_factory=list)

    @property
    def available(self) -> list[WaterfallPart]:
        return [p for p in self.parts if p.points is not None]

    def part(self, key: str) -> WaterfallPart | None:
        return next((p for p in self.parts if p.key == key), None)


def _ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def _exposed_fraction(metrics: TrialMetrics) -> tuple[float | None, str]:
    """Exposed collective time / traced step of the trial's own rank (the lowest traced), else the slowest's."""
    dist, facts = metrics.distributed, metrics.trace_facts
    if dist is None:
        return None, ""
    ranks = sorted((r for r in dist.ranks if r.exposed_collective_s_per_step is not None), key=lambda r: r.rank)
    if ranks and facts is not None and positive(facts.step_time_s):
        return min(positive(ranks[0].exposed_collective_s_per_step) / facts.step_time_s, 1.0), f"rank {ranks[0].rank}'s trace"
    comm = dist.communication
    if comm is not None and positive(comm.step_s):
        return min(positive(comm.exposed_collective_s) / comm.step_s, 1.0), f"rank {comm.rank}'s trace (the slowest traced)"
    return None, ""


def _trace_shares(metrics: TrialMetrics) -> tuple[dict[str, float], list[Message]] | None:
    """The trace's step less its data wait by part, shares summing to 1 (the step breakdown's slices, grouped);
    None without a usable trace."""
    facts = metrics.trace_facts
    if facts is None or not positive(facts.step_time_s):
        return None
    exposed, where = _exposed_fraction(metrics)
    cats = {k for k, v in facts.kernels.time_by_category.items() if positive(v) and (exposed is None or k != "communication")}
    notes = [msg("exposed_communication_from", where=where)] if exposed is not None else (
        [msg("communication_counted_exposed")] if "communication" in cats else [])
    if facts.gpu is not None and cats:
        notes.append(msg("overlapping_kernels_shared"))
    shares: dict[str, float] = {}
    for k, v in trace_shares(facts, exposed * facts.step_time_s if exposed is not None else None).items():
        part = PART_OF.get(k, "non_gemm")
        shares[part] = shares.get(part, 0.0) + v
    return shares, notes


def _evidence(share: float, step_s: float, source: str) -> str:
    return f"{_ms(share * step_s)} per step, {share:.1%} of the {_ms(step_s)} step ({source})"


def trial_waterfall(results: Results, trial: Trial) -> MfuWaterfall | None:
    """The waterfall of one run; None when it has no timed step."""
    m = trial.metrics
    if m is None or not trial.ok or not math.isfinite(m.mean_step_time_s) or m.mean_step_time_s <= 0:
        return None
    step = m.mean_step_time_s
    dw = 0.0 if "data_wait_share" in m.unavailable else min(max(m.data_wait_share, 0.0), 1.0)
    facts = m.trace_facts
    if results.source == "trace" and dw and facts is not None and facts.gpu is not None and positive(facts.step_time_s):
        dw = min(positive(facts.gpu.idle.data_wait_s) / facts.step_time_s, 1.0)  # exposed: the GPU idle while the host waited
    traced = _trace_shares(m)
    shares: dict[str, float] = {}
    notes: list[Message] = []
    unavailable: dict[str, Message] = {}
    window_src = "trace" if results.source == "trace" else "timed window"
    if "data_wait_share" in m.unavailable:
        unavailable["data_wait"] = m.unavailable["data_wait_share"]
        notes.append(msg("data_wait_not_marked"))
    else:
        shares["data_wait"] = dw
    no_trace = msg("waterfall_no_trace", traced=m.trace_facts is not None)
    if traced is not None:
        notes += traced[1]
        shares.update({k: (1.0 - dw) * v for k, v in traced[0].items()})
        if "communication" not in shares:
            unavailable["communication"] = msg("no_collectives_traced")
    else:
        for k in ("sync", "launch", "idle", "communication", "non_gemm"):
            unavailable[k] = no_trace
    mfu = m.mfu
    hfu = m.hfu if m.hfu is not None else mfu
    matmul = shares.pop("gemm", None)
    parts: dict[str, float] = dict(shares)
    peak = results.peak
    if mfu is not None and peak is not None:
        basis, end_label, end = "peak", "MFU", mfu
        denominator = msg("denominator_peak", tflops=peak.tflops, dtype=peak.dtype, source=peak.source)
        if m.hfu is None:
            unavailable["recompute"] = m.unavailable.get("hfu", msg("no_hardware_flops"))
        parts["recompute"] = max(hfu - mfu, 0.0)
        unavailable["padding"] = PADDING_UNKNOWN
        if matmul is not None:
            gemm = matmul - hfu
            ceiling = _ceiling_share(results, hfu)
            if ceiling is not None and gemm > 0:
                parts["ceiling"] = min(ceiling, gemm)
                gemm -= parts["ceiling"]
            parts["gemm"] = max(gemm, 0.0)
        elif traced is None:
            parts["unsplit"] = max(1.0 - dw - hfu, 0.0)
            unavailable["gemm"] = no_trace
        else:
            parts["unsplit"] = max(parts.pop("unsplit", 0.0) - hfu, 0.0)
            unavailable["gemm"] = msg("no_matmul_kernels")
    else:
        basis, end_label = "step time", "matmul-class kernels (MFU's ceiling at peak)"
        end = matmul if matmul is not None else 0.0
        why = m.unavailable.get("mfu") or (msg("no_peak_for_device") if peak is None else msg("no_flop_count"))
        denominator = msg("denominator_step", step=_ms(step), why=why)
        for k in ("gemm", "recompute", "padding"):
            unavailable[k] = msg("mfu_unknown", why=why)
        if matmul is None:
            end_label = "rest of the step (not split: no trace)" if traced is None else "matmul-class kernels (none traced)"
            if traced is None:
                end = 1.0 - dw
    residual = 1.0 - end - sum(parts.values())
    parts["residual"] = residual
    if abs(residual) * 100 > TOLERANCE_POINTS:
        notes.append(msg("points_unattributed", points=residual * 100))
    on_cpu = facts is not None and facts.gpu is None
    names = {"launch": "host overhead (Python, dispatch)"} if on_cpu else {}
    out: list[WaterfallPart] = []
    for key in PARTS:
        if key in parts:
            share = parts[key]
            out.append(WaterfallPart(key=key, points=share * 100, seconds=share * step if key in _TIME else None,
                                     evidence=_part_evidence(key, share, step, m, hfu, matmul, window_src),
                                     unavailable=unavailable.get(key), name=names.get(key, "")))
        elif key in unavailable:
            out.append(WaterfallPart(key=key, points=None, unavailable=unavailable[key]))
    return MfuWaterfall(trial=trial.name, basis=basis, denominator=denominator, step_s=step, end_label=end_label,
                        end_points=end * 100, parts=out, notes=notes)


def _ceiling_share(results: Results, hfu: float) -> float | None:
    """HFU·(P/C − 1): the step share a matmul at the measured ceiling C (not the peak P) needs beyond the peak's."""
    peak, ceilings = results.peak, results.environment.measured_ceiling_tflops
    if peak is None or not ceilings or "measured" in peak.source:
        return None
    c = max(ceilings.values())
    return hfu * (peak.tflops / c - 1.0) if 0 < c < peak.tflops else None


def _part_evidence(key: str, share: float, step: float, m: TrialMetrics, hfu: float, matmul: float | None, src: str) -> str:
    if key == "data_wait":
        return _evidence(share, step, f"exposed data wait, measured in the {src}")
    if key in ("sync", "launch", "idle", "communication", "non_gemm"):
        return _evidence(share, step, "the trace's proportions")
    if key == "unsplit":
        return f"{share:.1%} of the step: compute beyond what the FLOPs need at peak, not split without a trace"
    if key == "gemm":
        return (f"GEMM, conv and attention kernels take {(matmul or 0):.1%} of the step; at peak their FLOPs (HFU "
                f"{hfu:.1%}) would take {hfu:.1%}: the rest is time below peak")
    if key == "ceiling":
        return "the share of the matmul time the measured matmul ceiling needs beyond the datasheet peak"
    if key == "recompute":
        return f"HFU {hfu:.1%} − MFU {(m.mfu or 0):.1%}: FLOPs done again, not counted as model FLOPs"
    if key == "residual":
        return "100 % − the end bar − every part above"
    return ""


def mfu_waterfall(results: Results) -> MfuWaterfall | None:
    """The baseline run's waterfall (perfscope.results.roles), None without a timed run."""
    run = baseline_run(results)
    return trial_waterfall(results, run) if run is not None else None

"""pandas views of a results file, for notebooks: one DataFrame per table the report shows.

    >>> from perfscope.results import Results, frames
    >>> results = Results.load("perfscope-out/results.json")
    >>> frames.trials(results).groupby("configuration")["samples_per_s"].describe()
    >>> frames.knobs(results).sort_values("ratio", ascending=False)

Design notes: docs/results.md.
"""

from __future__ import annotations

import pandas as pd

from perfscope.results.model import Results
from perfscope.results.waterfall import mfu_waterfall

__all__ = ["findings", "kernels", "knobs", "ranks", "trials", "waterfall"]


_TRIAL_METRICS = ("samples_per_s", "tokens_per_s", "achieved_tflops", "mfu", "hfu", "flops_per_step", "data_wait_share",
                  "peak_memory_bytes", "micro_batch_size", "grad_accum_steps")
"""TrialMetrics fields the trials frame shows as they are (after its steps, wall time and step times)."""


def trials(results: Results) -> pd.DataFrame:
    """One row per run (fresh process): its configuration, status and what its timed windows measured."""
    rows = []
    for t in results.trials:
        m = t.metrics
        rows.append({
            "trial": t.name, "configuration": t.configuration, "repeat": t.repeat, "sequence": t.sequence,
            "status": t.status, "excluded": t.excluded.code if t.excluded else None, "knobs": ",".join(t.knobs), "error": t.error,
            "steps": m.steps if m else None, "wall_s": m.wall_s if m else None,
            "step_time_s": m.mean_step_time_s if m and m.steps else None,
            "typical_step_s": m.typical_step.median if m and m.typical_step else None,
            **{key: getattr(m, key) if m else None for key in _TRIAL_METRICS},
        })
    return _frame(rows, index="trial")


def knobs(results: Results) -> pd.DataFrame:
    """One row per knob the sweep tried (or why not): its measured gain over the baseline and verdict."""
    rows = []
    for k in results.sweep.knobs if results.sweep else []:
        g = k.gain
        rows.append({
            "knob": k.knob, "title": k.title, "status": k.status, "reason": ",".join(m.code for m in k.reason), "setting": k.setting,
            "configuration": k.trial, "verdict": g.verdict if g else None,
            "ratio": g.ratio if g else None, "low": g.low if g else None, "high": g.high if g else None,
            "confidence": g.confidence if g else None, "runs": g.runs if g else None,
            "reference_runs": g.reference_runs if g else None, "mfu": k.mfu,
            "recommended": bool(results.sweep and k.knob in results.sweep.recommended_knobs),
            "changes_semantics": ",".join(s.code for s in k.changes_semantics),  # codes: words are report/'s
        })
    return _frame(rows, index="knob")


def findings(results: Results) -> pd.DataFrame:
    """One row per finding, in the report's order: measured gains beside estimates, never mixed in one column."""
    return _frame([{
        "rule": f.rule_id, "title": f.title, "severity": f.severity,
        "measured_ratio": f.gain.ratio if f.gain else None, "measured_verdict": f.gain.verdict if f.gain else None,
        "estimated_ratio": f.estimated_gain, "configuration": f.trial,
        "addresses": ",".join(f.addresses), "caveats": ",".join(c.code for c in f.caveats),
    } for f in results.findings or []])


def kernels(results: Results) -> pd.DataFrame:
    """The longest kernels (CUDA) or aten ops (CPU) of each profiled run, seconds and launches per step."""
    traced = [(t, t.metrics.trace_facts.kernels) for t in results.trials
              if t.metrics and t.metrics.trace_facts and t.metrics.trace_facts.kernels is not None]
    return _frame([{"trial": t.name, "configuration": t.configuration, "source": top.source, "name": k.name,
                    "category": k.category, "time_s_per_step": k.time_s, "calls_per_step": k.count}
                   for t, top in traced for k in top.top])


def ranks(results: Results) -> pd.DataFrame:
    """One row per (run, rank) of a distributed run: where a job's ranks differ (stragglers, memory, comm)."""
    rows = []
    for t in results.trials:
        dist = t.metrics.distributed if t.metrics else None
        for r in dist.ranks if dist else []:
            rows.append({
                "trial": t.name, "configuration": t.configuration, "rank": r.rank, "node": r.node,
                "steps": r.steps, "wall_s": r.wall_s, "samples_per_s": r.samples_per_s,
                "data_wait_share": r.data_wait_share, "gc_pause_s": r.gc_pause_s,
                "peak_memory_bytes": r.peak_memory_bytes,
                "collective_s_per_step": r.collective_s_per_step,
                "exposed_collective_s_per_step": r.exposed_collective_s_per_step,
            })
    return _frame(rows)


def waterfall(results: Results) -> pd.DataFrame:
    """The MFU gap of the baseline run, part by part (points of the 100 %; they sum to 100 − the end bar). Which
    fixes act on each part is the report's (perfscope.report.waterfall_chart.part_fixes)."""
    wf = mfu_waterfall(results)
    return _frame([{"part": p.key, "label": p.label, "group": p.spec.group, "points": p.points,
                    "seconds_per_step": p.seconds, "evidence": p.evidence, "unavailable": p.unavailable}
                   for p in (wf.parts if wf else [])], index="part")


def _frame(rows: list[dict[str, object]], *, index: str | None = None) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(rows)
    return frame.set_index(index) if index and not frame.empty else frame

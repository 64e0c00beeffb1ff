"""The report's view model: every number formatted and every choice made, so templates only lay it out.

    >>> from perfscope.report.view import build_view
    >>> view = build_view(Results.load("perfscope-out/results.json"))
    >>> view.headline.rows[0].label, [c.text for c in view.headline.rows[0].values]

Design notes: docs/report.md.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from perfscope.ranking import rank_results
from perfscope.report.charts import Chart, baseline_breakdown_chart, build_charts, gain_chart
from perfscope.report.distributed import DistributedView, distributed_view
from perfscope.report.findings import (
    DiffLine,
    FindingView,
    breakdown_table,
    dataset_cost,
    diff_lines,
    fix_views,
    point_at_breakdown,
    why_line,
)
from perfscope.report.format import NA, Table, fmt_seconds
from perfscope.report.headline import Headline, Story, build_story, headline_view, tell
from perfscope.report.lanes import LanesView, lanes_view
from perfscope.report.layout import LayoutView, layout_view
from perfscope.report.structure import knob_effects
from perfscope.report.tables import (
    FailureView,
    KnobRow,
    Row,
    TraceLink,
    environment,
    failures,
    kernels,
    knob_rows,
    recommended_structure,
    trace_diff,
    trace_href,
    traces,
    trial_rows,
    workload,
)
from perfscope.report.waterfall_chart import WaterfallView, waterfall_view
from perfscope.results import Environment, Results
from perfscope.results.breakdown import step_breakdown
from perfscope.results.roles import baseline_configuration, baseline_run, recommended_configuration, recommended_run
from perfscope.wording import reason, words

__all__ = ["DiffLine", "FindingView", "ReportView", "baseline_name", "build_view", "diff_lines", "recommended_name", "trace_href"]


@dataclass(kw_only=True, slots=True)
class ReportView:
    title: str
    created_at: str
    perfscope_version: str
    source: str
    device: str
    peak: str  # "989.4 TFLOP/s (bf16)" or "not measured"
    peak_source: str
    headline: Headline
    story: Story | None  # the answer in words (perfscope.report.headline), for the terminal's lines
    findings_state: str  # "not run" | "none" | "present"
    findings: list[FindingView]
    no_change: list[FindingView]
    knobs: list[KnobRow]
    inapplicable: list[KnobRow]  # folded: knobs that mean nothing on this run, with their reasons
    sweep_notes: list[str]
    trials: Table  # every run, the baseline and the recommendation marked
    failures: list[FailureView]
    charts: list[Chart]
    gain_chart: Chart | None  # the answer's chart, on the first screen
    absent_charts: list[str]  # one line per chart this run has no data for, saying why
    kernels: Table  # the longest kernels of kernels_trial's trace
    kernels_trial: str
    trace_diff: Table  # per kernel category, the baseline's trace against the recommendation's
    breakdown: Table  # the baseline's step by slice (the first chart, as a table)
    environment: list[Row]
    workload: list[Row]
    traces: list[TraceLink]
    command: str
    notes: list[str]
    recommended_structure: list[str] = field(default_factory=list)  # what the stacked recommendation changed, counted
    structure_notes: list[str] = field(default_factory=list)  # why structural changes are not shown
    warnings: list[str] = field(default_factory=list)  # measurement problems a reader must see with the answer
    distributed: DistributedView | None = None  # every rank, communication and sharding memory of a data-parallel run
    waterfall: WaterfallView | None = None  # the MFU gap, part by part (perfscope.report.waterfall_chart)
    layout: LayoutView | None = None  # the (dp, tp, pp) layout search's table (perfscope.report.layout)
    lanes: LanesView | None = None  # a parallel sweep's lanes (perfscope.report.lanes)


# ------------------------------------------------------------------------------------------ roles


def baseline_name(results: Results) -> str | None:
    """The baseline's representative run (perfscope.results.roles), else the first run."""
    run = baseline_run(results)
    if run is not None:
        return run.name
    return results.trials[0].name if results.trials else None


def recommended_name(results: Results) -> str | None:
    run = recommended_run(results)
    if run is not None and recommended_configuration(results) != baseline_configuration(results):
        return run.name
    return None


# -------------------------------------------------------------------------------------- assembly


def build_view(results: Results, *, report_dir: Path | None = None) -> ReportView:
    """Everything the templates show. ``report_dir`` makes absolute trace paths relative to the report."""
    base_name, rec_name = baseline_name(results), recommended_name(results)
    base = results.trial(base_name) if base_name else None
    rec = results.trial(rec_name) if rec_name else None
    ranking = rank_results(results)  # the one order: fixes, knobs and the gain chart (perfscope.ranking)
    story = build_story(results, ranking)
    state = "not run" if results.findings is None else "present" if results.findings else "none"
    effects = knob_effects(results)
    charts, absent = build_charts(results, baseline=base_name, recommended=rec_name)
    findings = fix_views(ranking.fixes, story)
    no_change = fix_views(ranking.no_help)
    slices = step_breakdown(base.metrics) if base is not None and base.ok and base.metrics is not None else []
    marks = point_at_breakdown(findings, slices)
    point_at_breakdown(no_change, slices)
    for v in findings + no_change:
        dataset_cost(v, results, base)
    breakdown = baseline_breakdown_chart(slices, marks, base_name or "")
    if breakdown is not None:
        charts.insert(0, breakdown)
    waterfall = waterfall_view(results, findings)
    if waterfall is not None and waterfall.chart is not None:
        charts.insert(1 if breakdown is not None else 0, waterfall.chart)
    sweep = results.sweep
    sweep_notes = [words(n) for n in sweep.notes] if sweep else []
    if sweep and sweep.stopped_early:
        sweep_notes.insert(0, f"The search stopped early: {words(sweep.stopped_early)}.")
    if sweep and sweep.elapsed_s is not None:
        budget = f" of a {fmt_seconds(sweep.budget_s)} budget" if sweep.budget_s else ""
        sweep_notes.append(f"Search time {fmt_seconds(sweep.elapsed_s)}{budget}.")
    kernel_rows, kernels_trial = kernels(results, [base_name, rec_name])
    peak = results.peak
    env = results.environment
    headline = tell(headline_view(results, base, rec, ranking.recommendation), story)
    headline.why = why_line(slices, findings)
    view = ReportView(
        title=results.workload.name or Path(results.workload.path).stem, created_at=results.created_at,
        perfscope_version=results.perfscope_version, source=results.source,
        device=env.device_name + (f" × {env.device_count}" if env.device_count > 1 else ""),
        peak=f"{peak.tflops:g} TFLOP/s ({peak.dtype})" if peak else "not measured",
        peak_source=peak.source if peak else "no peak known for this device; MFU is n/a (pass --peak-tflops)",
        headline=headline, story=story, findings_state=state, findings=findings, no_change=no_change,
        knobs=knob_rows(ranking, ranking.knobs, effects), inapplicable=knob_rows(ranking, ranking.folded, effects),
        sweep_notes=sweep_notes, trials=trial_rows(results, base_name, rec_name), failures=failures(results),
        charts=charts, gain_chart=gain_chart(ranking.gains), absent_charts=absent,
        kernels=kernel_rows, kernels_trial=kernels_trial, trace_diff=trace_diff(base, rec),
        environment=environment(results), workload=workload(results), traces=traces(results, report_dir),
        command=shlex.join(results.command) if results.command else "", notes=[words(n) for n in results.notes],
        recommended_structure=recommended_structure(results, effects),
        structure_notes=list(dict.fromkeys(words(n) for e in effects.values() if not e.compared for n in e.notes)),
        warnings=[words(w) for w in results.warnings],
        breakdown=breakdown_table(slices, marks),
        distributed=distributed_view(results, baseline=base, recommended=rec), waterfall=waterfall,
        layout=layout_view(results), lanes=lanes_view(sweep.parallel if sweep else None),
    )
    if results.source == "trace":  # a trace the user brought: nothing ran (trace_headline below)
        trace_headline(view.headline)
        view.peak, view.peak_source = trace_peak(env)
    return view


# The report of a trace the user brought (Results.source "trace"): what a trace can show, and that nothing ran.

TRACE_LEAD = ("Read from a trace, with no rerun: nothing was measured, so every finding below is an estimate from the "
              "trace; step times are the trace's own, throughput and MFU are unknown (a trace has no batch and no FLOP count).")


def trace_headline(h: Headline) -> None:
    """The headline without the rows a trace cannot fill, its column named "Trace", the lead saying the findings
    are estimates."""
    if h.message:
        return
    h.rows = [row for row in h.rows if any(cell.text != NA for cell in row.values)]
    for cell in h.columns:
        cell.text = "Trace"
    h.lead = TRACE_LEAD


def trace_peak(env: Environment) -> tuple[str, str]:
    """The peak line (peak, its source): the device's datasheet peaks for context, and why MFU is n/a."""
    if env.datasheet_peaks_tflops:
        peaks = ", ".join(f"{dtype} {tflops:g}" for dtype, tflops in env.datasheet_peaks_tflops.items())
        return f"datasheet {peaks} TFLOP/s", f"{env.datasheet_source}; MFU is n/a: a trace has no FLOP count"
    why = reason(env.unavailable, "datasheet_peaks_tflops", "a CPU has no datasheet peak here")
    return "unknown", why + "; MFU is n/a: a trace has no FLOP count"

"""The report's view model: every number formatted and every choice made, so templates only lay it out.

    >>> from perfscope.report.view import build_view
    >>> view = build_view(Results.load("perfscope-out/results.json"))
    >>> view.headline.rows[0].label, [c.text for c in view.headline.rows[0].values]

Why a view model: deciding what to show (which trial is the baseline, when a gain counts, what "n/a"
means) is logic that deserves unit tests; Jinja templates are hard to test and easy to clutter. The HTML
and the Markdown renderers share this model, so they never disagree.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from perfscope.report import facts
from perfscope.report.charts import Chart, baseline_breakdown_chart, build_charts, gain_chart
from perfscope.report.distributed import DistributedView, distributed_view
from perfscope.report.layout import LayoutView, layout_view
from perfscope.report.format import (
    NA,
    fmt_bytes,
    fmt_count,
    fmt_interval,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
)
from perfscope.report.reference import configuration_rate, gain_figures
from perfscope.report.story import (
    Story,
    alternative_line,
    build_story,
    closest_line,
    gain_of,
    gain_words,
    interval_words,
    noise_words,
    recommendation_line,
    reference_words,
)
from perfscope.report.structure import StructuralEffect, knob_effects
from perfscope.report.trace_only import adapt_for_trace
from perfscope.results import (
    FAILED_STATUSES,
    Finding,
    Gain,
    KnobOutcome,
    Results,
    Trial,
)
from perfscope.results.breakdown import WHOLE_STEP, StepSlice, addressed, step_breakdown
from perfscope.results.roles import (
    baseline_configuration,
    baseline_run,
    recommended_configuration,
    recommended_run,
)
from perfscope.trace.diff import diff_facts

MAX_KERNEL_ROWS = 15
MAX_KERNEL_NAME = 160
PERFETTO_URL = "https://ui.perfetto.dev"
HTA_URL = "https://github.com/facebookresearch/HolisticTraceAnalysis"


@dataclass(kw_only=True, slots=True)
class Cell:
    text: str
    note: str = ""  # a second, quieter line: the p10–p90 range, or why a value is n/a


@dataclass(kw_only=True, slots=True)
class HeadlineRow:
    label: str
    values: list[Cell]  # one per headline column
    change: str = ""  # recommended vs baseline, e.g. "1.82× faster"
    better: bool | None = None  # colours the change; None when neutral or unknown


@dataclass(kw_only=True, slots=True)
class Headline:
    columns: list[Cell]  # text: role ("Baseline"), note: the trial's name
    rows: list[HeadlineRow]
    gain: str = ""  # the recommendation's measured speed-up with its interval
    gain_significant: bool | None = None
    recommended_knobs: list[str] = field(default_factory=list)
    message: str = ""  # shown instead of rows when there is nothing to compare
    lead: str = ""  # one sentence above the rows when only the baseline is shown, saying why
    recommendation: str = ""  # what to do, in one line (perfscope.report.story)
    settings: list[str] = field(default_factory=list)  # every recommended knob with its winning value
    reference: str = ""  # which runs the gain is measured against
    noise: str = ""  # this machine's run-to-run noise
    alternative: str = ""  # the fastest option that changes semantics, with its gain and caveat
    closest: str = ""  # keeping the baseline: how close the best measured option came, with its interval
    settings_label: str = "Settings"  # "Your settings" when the baseline is kept
    why: str = ""  # why the baseline is slow: its largest step-time slice and the fix that addresses it
    caveats: list[str] = field(default_factory=list)  # semantics the recommendation itself changes (numerics)


@dataclass(kw_only=True, slots=True)
class DiffLine:
    kind: str  # "add" | "del" | "hunk" | "ctx"
    text: str


@dataclass(kw_only=True, slots=True)
class FindingView:
    rank: int
    rule_id: str
    title: str
    severity: str
    gain_kind: str  # "measured" | "estimated" | "not quantified"
    gain_text: str  # "1.42× faster" or "≈1.30× faster"
    interval: str  # "95 % CI [1.35, 1.50]" (measured only)
    estimate_method: str
    evidence: list[str]
    fix: list[DiffLine]
    caveats: list[str]
    reference_url: str | None  # only http(s) links become anchors
    reference_text: str
    trial: str
    why_not_here: str = ""  # measured and did not help: the rule's account of why
    recommended: bool = False  # this item is what the headline recommends
    estimate_bound: str = ""  # the machine limit that bounds the estimate (or how far the fix can go)
    addresses_keys: list[str] = field(default_factory=list)  # slices of the baseline's step breakdown it acts on
    addresses: str = ""  # those slices in words, with their time: "data wait: 57.0 ms, 72 % of the baseline's step"
    dataset_cost: list[ProfileRow] = field(default_factory=list)  # the data-loader finding: where the Dataset's time goes
    dataset_cost_caption: str = ""


@dataclass(kw_only=True, slots=True)
class SliceRow:
    """One slice of the baseline's step-time breakdown, with the ranked fixes that act on it."""

    label: str
    time: str
    share: str
    fixes: str  # "#1, #3" or ""


@dataclass(kw_only=True, slots=True)
class ProfileRow:
    """One function of the Dataset's profiled pass."""

    function: str
    share: str  # of the pass's profiled time
    self_time: str  # per sample
    cumulative: str  # per sample
    calls: str  # per sample


@dataclass(kw_only=True, slots=True)
class KnobRow:
    knob: str
    title: str
    status: str
    gain: str
    interval: str
    significant: bool | None
    setting: str  # the winning value, shown next to the gain
    reference: str  # what the gain is measured against (runs)
    mfu: str
    semantics: list[str]
    reason: str
    trial: str
    structure: list[str] = field(default_factory=list)  # what it changed in the step, counted (perfscope.report.structure)
    structure_notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class TrialRow:
    name: str
    role: str  # "baseline" | "recommended" | ""
    status: str
    knobs: str
    batch: str  # "micro × accumulation"
    step_time: Cell
    throughput: str
    mfu: str
    peak_memory: str
    wall_time: str


@dataclass(kw_only=True, slots=True)
class FailureView:
    name: str
    status: str
    knobs: str
    error: str


@dataclass(kw_only=True, slots=True)
class KernelRow:
    name: str
    full_name: str
    time: str
    count: str
    share: str


@dataclass(kw_only=True, slots=True)
class Row:
    label: str
    value: str


@dataclass(kw_only=True, slots=True)
class TraceLink:
    trial: str
    href: str
    label: str


@dataclass(kw_only=True, slots=True)
class TraceDiffRow:
    """One kernel category's time per step in the baseline's and the recommendation's traces."""

    category: str
    baseline: str
    recommended: str
    change: str


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
    findings_state: str  # "not run" | "none" | "present"
    findings: list[FindingView]
    no_change: list[FindingView]
    knobs: list[KnobRow]
    inapplicable: list[KnobRow]  # folded: knobs that mean nothing on this run, with their reasons
    sweep_notes: list[str]
    trials: list[TrialRow]
    failures: list[FailureView]
    charts: list[Chart]
    gain_chart: Chart | None  # the answer's chart, on the first screen
    absent_charts: list[str]  # one line per chart this run has no data for, saying why
    kernels: list[KernelRow]
    kernels_trial: str
    trace_diff: list[TraceDiffRow]
    environment: list[Row]
    workload: list[Row]
    traces: list[TraceLink]
    command: str
    notes: list[str]
    recommended_structure: list[str] = field(default_factory=list)  # what the stacked recommendation changed, counted
    structure_notes: list[str] = field(default_factory=list)  # why structural changes are not shown
    warnings: list[str] = field(default_factory=list)  # measurement problems a reader must see with the answer
    breakdown: list[SliceRow] = field(default_factory=list)  # the baseline's step by slice (the first chart, as a table)
    distributed: DistributedView | None = None  # every rank, communication and sharding memory of a data-parallel run
    layout: LayoutView | None = None  # the (dp, tp, pp) layout search's table (perfscope.report.layout)
    perfetto_url: str = PERFETTO_URL
    hta_url: str = HTA_URL


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


# -------------------------------------------------------------------------------------- formatting


def gain_text(ratio: float) -> str:
    """A throughput ratio in words; below 1 the candidate is slower (perfscope.report.story.gain_words)."""
    return f"{fmt_ratio(ratio)} faster" if ratio >= 1 else f"{fmt_ratio(1 / ratio)} slower"


def gain_interval(gain: Gain) -> str:
    return interval_words(gain)


def _reason(trial: Trial, metric: str) -> str:
    m = trial.metrics
    return (m.unavailable.get(metric, "") if m else "") or "not measured"


def _step_cell(trial: Trial, scale: float = 1.0) -> Cell:
    """Wall time per step; ``scale`` (a rate over this run's) turns it into the step time at that rate."""
    m = trial.metrics
    assert m is not None
    s = m.typical_step
    note = f"typical step {fmt_seconds(s.median)} (p10–p90 {fmt_seconds(s.p10)} – {fmt_seconds(s.p90)})" if s else ""
    return Cell(text=fmt_seconds(m.mean_step_time_s / scale), note=note)


def _knob_list(knobs: list[str]) -> str:
    return " + ".join(knobs) if knobs else "—"


# -------------------------------------------------------------------------------------- headline


def memory_label(results: Results) -> str:
    """What "peak memory" is on this run: the caching allocator's peak on a GPU, the process's host RSS on a CPU."""
    return "Peak memory (allocator peak)" if results.environment.device_type == "cuda" else "Peak memory (host RSS)"


def _tell(headline: Headline, story: Story | None) -> Headline:
    """The story's lines on the headline: what to do, its gain, settings, reference, noise, the alternative."""
    if story is None:
        return headline
    headline.recommendation = recommendation_line(story)
    r = story.recommended
    if r is not None:
        headline.settings = list(r.settings)
        headline.reference = reference_words(r.gain)
        headline.caveats = list(r.caveats)
        headline.gain = f"{gain_words(r.gain)} ({interval_words(r.gain)})"
        headline.gain_significant = r.gain.significant
        headline.recommended_knobs = list(r.knobs)
        headline.lead = ""
    else:
        headline.reference = f"your configuration ({story.baseline}), measured in {story.baseline_runs} runs"
        headline.settings, headline.settings_label = list(story.baseline_settings), "Your settings"
        headline.closest = closest_line(story)
        headline.lead = ""
    headline.noise = noise_words(story.noise)
    headline.alternative = alternative_line(story)
    return headline


def _headline(results: Results, base: Trial | None, rec: Trial | None) -> Headline:
    if base is None:
        return Headline(columns=[], rows=[], message="No trials were recorded.")
    if not base.ok:
        return Headline(
            columns=[],
            rows=[],
            message=f"The baseline trial {base.name!r} did not complete (status: {base.status}); see Failed trials.",
        )
    shown = [(Cell(text="Baseline", note=base.name), base)]
    if rec is not None and rec.ok:
        shown.append((Cell(text="Recommended", note=rec.name), rec))
    trials = [t for _, t in shown]
    both = len(trials) == 2
    bm = base.metrics
    rm = trials[-1].metrics
    assert bm is not None and rm is not None
    gain = results.sweep.recommended_gain if results.sweep else None
    # The figures the gain was computed from (report/reference.py): each run's rate-based figures are scaled to them.
    figures = gain_figures(results, gain, candidate=trials[-1].configuration) if both and gain else None
    rates = [figures.reference_rate, figures.rate] if figures else [t.metrics.samples_per_s for t in trials]  # type: ignore[union-attr]
    scales = [r / t.metrics.samples_per_s if r and t.metrics.samples_per_s else 1.0 for r, t in zip(rates, trials)]  # type: ignore[union-attr]
    rate_note = figures.words if figures is not None else ""
    if not both and (kept := configuration_rate(results, base.configuration)) is not None and kept[1] > 1:
        rates, scales = [kept[0]], [kept[0] / bm.samples_per_s if bm.samples_per_s else 1.0]
        rate_note = f"geometric mean of its {kept[1]} runs"

    rows: list[HeadlineRow] = []

    def mfu_cell(t: Trial, scale: float) -> Cell:
        m = t.metrics
        if m is None or m.mfu is None:
            return Cell(text=NA, note=_reason(t, "mfu"))
        note = f"{fmt_rate(m.achieved_tflops * scale, 'TFLOP/s')} achieved" if m.achieved_tflops is not None else ""
        return Cell(text=fmt_percent(m.mfu * scale), note=note)

    mfu_row = HeadlineRow(label="MFU", values=[mfu_cell(t, k) for t, k in zip(trials, scales)])
    if both and bm.mfu is not None and rm.mfu is not None:
        delta = (rm.mfu * scales[1] - bm.mfu * scales[0]) * 100
        mfu_row.change, mfu_row.better = f"{delta:+.1f} pts", delta > 0 if delta else None
    rows.append(mfu_row)

    step_row = HeadlineRow(label="Step time (wall / steps)", values=[_step_cell(t, k) for t, k in zip(trials, scales)])
    if both:
        ratio = gain.ratio if gain else bm.mean_step_time_s / rm.mean_step_time_s
        step_row.change, step_row.better = gain_text(ratio), ratio > 1
        if gain and not gain.significant:
            step_row.better = None
    rows.append(step_row)

    rows.append(_rate_row("Throughput", "samples/s", rates, both, gain))
    rows[-1].values[0].note = rate_note  # where the figure comes from: the runs the gain was measured against
    if any(t.metrics.tokens_per_s is not None for t in trials):  # type: ignore[union-attr]
        tokens = [t.metrics.tokens_per_s * k if t.metrics.tokens_per_s is not None else None for t, k in zip(trials, scales)]  # type: ignore[union-attr]
        rows.append(_rate_row("Tokens", "tokens/s", tokens, both, gain))

    def mem_cell(t: Trial) -> Cell:
        m = t.metrics
        assert m is not None
        if m.peak_memory_bytes is None:
            return Cell(text=NA, note=_reason(t, "peak_memory_bytes"))
        cap = m.device_memory_capacity_bytes or (results.environment.host_memory_bytes if not results.environment.device_type == "cuda" else None)
        what = "device memory" if results.environment.device_type == "cuda" else "host memory"
        note = f"{m.peak_memory_bytes / cap * 100:.0f} % of {fmt_bytes(cap)} {what}" if cap else ""
        return Cell(text=fmt_bytes(m.peak_memory_bytes), note=note)

    mem_row = HeadlineRow(label=memory_label(results), values=[mem_cell(t) for t in trials])
    if both and bm.peak_memory_bytes and rm.peak_memory_bytes:
        change = rm.peak_memory_bytes / bm.peak_memory_bytes - 1
        mem_row.change = f"{change * 100:+.0f} %"
        mem_row.better = (change < 0) if abs(change) >= 0.005 else None
    rows.append(mem_row)

    headline = Headline(columns=[c for c, _ in shown], rows=rows)
    if both and gain:
        headline.gain = f"{gain_text(gain.ratio)} ({gain_interval(gain)})"
        headline.gain_significant = gain.significant
        headline.recommended_knobs = list(results.sweep.recommended_knobs) if results.sweep else []
    if not both:
        if results.sweep is not None and results.sweep.recommended_trial == base.configuration:
            headline.lead = "The sweep found no configuration significantly faster than the baseline: the baseline is the recommendation."
        elif results.sweep is not None:
            headline.lead = "The sweep did not produce a recommendation (see the notes under the knobs); the numbers below are the baseline."
        else:
            headline.lead = "One configuration measured (no sweep): the numbers below are the baseline."
    return headline


def _rate_row(label: str, unit: str, values: list[float | None], both: bool, gain: Gain | None = None) -> HeadlineRow:
    """A throughput row; its change is the measured gain (all runs, paired), the same number as the headline's."""
    row = HeadlineRow(label=label, values=[Cell(text=fmt_rate(v, unit)) for v in values])
    if both and gain is not None:
        row.change, row.better = gain_words(gain), (gain.ratio > 1) if gain.significant else None
    elif both and values[0] and values[1]:
        ratio = values[1] / values[0]
        row.change, row.better = gain_text(ratio), ratio > 1 if abs(ratio - 1) >= 0.005 else None
    return row


# -------------------------------------------------------------------------------------- findings


def diff_lines(fix: str) -> list[DiffLine]:
    """Classify a fix's lines the way a diff viewer would (the text itself is kept verbatim)."""
    lines = []
    for line in fix.rstrip("\n").splitlines():
        if line.startswith(("+++", "---")):
            kind = "ctx"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = "ctx"
        lines.append(DiffLine(kind=kind, text=line))
    return lines


def _finding_view(rank: int, f: Finding) -> FindingView:
    if f.gain is not None:
        kind, text, interval = "measured", gain_text(f.gain.ratio), gain_interval(f.gain)
    elif f.estimated_gain is not None:
        kind, text, interval = "estimated", "≈" + gain_text(f.estimated_gain), ""
    else:
        kind, text, interval = "not quantified", "", ""
    ref = f.reference or ""
    return FindingView(
        rank=rank,
        rule_id=f.rule_id,
        title=f.title,
        severity=f.severity,
        gain_kind=kind,
        gain_text=text,
        interval=interval,
        estimate_method=(f.estimate_method or "") if kind == "estimated" else "",
        evidence=list(f.evidence),
        fix=diff_lines(f.fix) if f.fix else [],
        caveats=list(f.caveats),
        reference_url=ref if ref.startswith(("https://", "http://")) else None,
        reference_text=ref,
        trial=f.trial or "",
        why_not_here=f.why_not_here or "",
        estimate_bound=f.estimate_bound or "",
        addresses_keys=list(f.addresses),
    )


def _knob_of(results: Results, finding: Finding) -> KnobOutcome | None:
    sweep = results.sweep
    return next((o for o in sweep.knobs if o.trial and o.trial == finding.trial), None) if sweep and finding.trial else None


def ranked_views(results: Results, story: Story | None, ranked: list[Finding]) -> list[FindingView]:
    """The ranked fixes, starting with exactly what the headline recommends, with the headline's numbers.

    A recommendation of one knob is that knob's finding with the recommendation's gain (all its runs); a
    stack is one item "apply together" with the stack's gain, each knob's fix and its gain alone, and the
    knobs' own findings are folded into it. Then the engine's order.
    """
    rest = list(ranked)
    first: list[FindingView] = []
    r = story.recommended if story else None
    if r is not None:
        mine = [f for f in rest if (o := _knob_of(results, f)) is not None and o.knob in r.knobs]
        rest = [f for f in rest if f not in mine]
        if len(r.knobs) == 1 and mine:
            view = _finding_view(1, mine[0])
            view.gain_kind, view.gain_text, view.interval = "measured", gain_words(r.gain), interval_words(r.gain)
            view.trial = r.configuration
        else:
            fixes = "\n".join(f.fix for f in mine if f.fix)
            evidence = [line for f in mine for line in
                        ([f"{f.title}: alone {gain_words(f.gain)} ({interval_words(f.gain)})"] if f.gain else [f.title]) + f.evidence]
            view = FindingView(rank=1, rule_id=", ".join(dict.fromkeys(f.rule_id for f in mine)) or "sweep",
                               title=("Apply together: " if len(r.knobs) > 1 else "") + r.label, severity="high", gain_kind="measured",
                               gain_text=gain_words(r.gain), interval=interval_words(r.gain), estimate_method="",
                               evidence=evidence, fix=diff_lines(fixes) if fixes else [],
                               caveats=list(dict.fromkeys(r.caveats + [c for f in mine for c in f.caveats])),
                               reference_url=None, reference_text="", trial=r.configuration,
                               addresses_keys=list(dict.fromkeys(k for f in mine for k in f.addresses)))
            refs = [f.reference for f in mine if f.reference and f.reference.startswith(("https://", "http://"))]
            view.reference_url = view.reference_text = refs[0] if refs else None
            view.reference_text = view.reference_text or ""
        view.recommended = True
        first.append(view)
    for f in rest:
        view = _finding_view(len(first) + 1, f)
        o = _knob_of(results, f)
        if o is not None and f.gain is not None and (g := gain_of(results, o)) is not None:
            view.gain_text, view.interval = gain_words(g), interval_words(g)
        first.append(view)
    return first


def addresses_words(slices: list[StepSlice], keys: list[str]) -> str:
    """The slices a fix acts on, with their time in the baseline's step ("" when it acts on none of it)."""
    hit = addressed(slices, keys)
    if not hit:
        return ""
    step = sum(s.seconds for s in slices)
    if WHOLE_STEP in keys:
        return f"the whole step: {fmt_seconds(step)} (each sample's share of every slice)"
    seconds = sum(s.seconds for s in hit)
    return f"{' + '.join(s.label for s in hit)}: {fmt_seconds(seconds)}, {seconds / step * 100:.0f} % of the baseline's step"


def why_line(slices: list[StepSlice], views: list[FindingView]) -> str:
    """Why the baseline is slow, in one line: its largest slice of the step, and the first ranked fix acting on it."""
    if not slices:
        return ""
    top = max(slices, key=lambda s: s.seconds)
    if top.key == "compute" or top.share < 0.25:
        return ""  # an unsplit or spread-out step says nothing a reader can act on
    fix = next((v for v in views if top in addressed(slices, v.addresses_keys) and WHOLE_STEP not in v.addresses_keys), None)
    where = f" — fix #{fix.rank} addresses it: {fix.title}" if fix else ""
    return f"{top.label} is {top.share * 100:.0f} % of the baseline's step ({fmt_seconds(top.seconds)} of {fmt_seconds(sum(s.seconds for s in slices))}){where}"


def point_at_breakdown(views: list[FindingView], slices: list[StepSlice]) -> dict[str, list[int]]:
    """Fill each ranked fix's `addresses` and return slice key -> the ranks of the fixes that act on it."""
    marks: dict[str, list[int]] = {}
    for v in views:
        v.addresses = addresses_words(slices, v.addresses_keys)
        if WHOLE_STEP in v.addresses_keys:
            continue  # every slice: marking them all would say nothing
        for s in addressed(slices, v.addresses_keys):
            marks.setdefault(s.key, []).append(v.rank)
    return marks


def dataset_cost(view: FindingView, trial: Trial | None) -> None:
    """The data-loader finding carries the baseline's Dataset profile as a table (perfscope.results.dataset_profile)."""
    profile = trial.metrics.dataset_profile if trial is not None and trial.metrics is not None else None
    if view.rule_id != "PS201" or profile is None or not profile.top:
        return
    n = max(profile.samples, 1)
    view.dataset_cost = [ProfileRow(function=f.label, share=fmt_percent(f.self_share, 0), self_time=fmt_seconds(f.self_s / n),
                                    cumulative=fmt_seconds(f.cumulative_s / n), calls=f"{f.calls / n:.3g}")
                         for i, f in enumerate(profile.top) if i < 3 or f.self_share >= 0.005]  # slivers say nothing
    view.dataset_cost_caption = (f"Where __getitem__ and collate spend their time: {profile.samples} samples of the Dataset profiled in the "
                                 f"trial process (cProfile; times per sample, the profiler's overhead included)")


def split_findings(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(ranked fixes, measured but did not help here): measured beats believed, as in the rules engine."""
    return [f for f in findings if not f.measured_no_help], [f for f in findings if f.measured_no_help]


# -------------------------------------------------------------------------------------- tables


def _knob_rows(results: Results, effects: dict[str, StructuralEffect]) -> list[KnobRow]:
    """Every knob of the sweep, with the gain the headline and the ranked fixes show for it (story.gain_of)
    and what it changed in the step (perfscope.report.structure)."""
    rows = []
    for k in results.sweep.knobs if results.sweep else []:
        g = gain_of(results, k)
        effect = effects.get(k.trial or "")
        rows.append(
            KnobRow(
                knob=k.knob,
                title=k.title,
                status=k.status,
                gain=gain_words(g) if g else "—",
                interval=fmt_interval(g.low, g.high) if g else "",
                significant=g.significant if g else None,
                setting=k.setting or "",
                reference=f"vs {g.reference} ({g.runs} : {g.reference_runs} runs)" if g else "",
                mfu=fmt_percent(k.mfu) if k.mfu is not None else "—",
                semantics=list(k.changes_semantics),
                reason=k.reason or "",
                trial=k.trial or "",
                structure=effect.lines() if effect else [],
                structure_notes=[n for n in effect.notes if effect.compared] if effect else [],
            )
        )
    return rows


def _trial_rows(results: Results, base: str | None, rec: str | None) -> list[TrialRow]:
    rows = []
    for t in results.trials:
        m = t.metrics
        role = "baseline" if t.name == base else "recommended" if t.name == rec else ""
        if m is None:
            batch = str(t.config.micro_batch_size)
            rows.append(
                TrialRow(name=t.name, role=role, status=t.status, knobs=_knob_list(t.knobs), batch=batch, step_time=Cell(text="—"),
                         throughput="—", mfu="—", peak_memory="—", wall_time=fmt_seconds(t.wall_time_s) if t.wall_time_s else "—")
            )
            continue
        throughput = fmt_rate(m.tokens_per_s, "tokens/s") if m.tokens_per_s is not None else fmt_rate(m.samples_per_s, "samples/s")
        status = t.status + (f" · not applied: {', '.join(m.not_applied)}" if m.not_applied else "")
        rows.append(
            TrialRow(
                name=t.name,
                role=role,
                status=status,
                knobs=_knob_list(t.knobs),
                batch=f"{m.micro_batch_size} × {m.grad_accum_steps}",
                step_time=_step_cell(t),
                throughput=throughput,
                mfu=fmt_percent(m.mfu) if m.mfu is not None else NA,
                peak_memory=fmt_bytes(m.peak_memory_bytes),
                wall_time=fmt_seconds(t.wall_time_s) if t.wall_time_s else "—",
            )
        )
    return rows


def _failures(results: Results) -> list[FailureView]:
    return [
        FailureView(name=t.name, status=t.status, knobs=_knob_list(t.knobs), error=(t.error or "").strip() or "(no error text recorded)")
        for t in results.trials
        if t.status in FAILED_STATUSES or t.status == "skipped"
    ]


def _kernels(results: Results, names: list[str | None]) -> tuple[list[KernelRow], str]:
    candidates = [results.trial(n) for n in names if n] + results.ok_trials()
    for t in candidates:
        if t is None or t.metrics is None:
            continue
        kernels = facts.top_kernels(t.metrics.trace_facts)
        if not kernels:
            continue
        total = sum(facts.kernel_time_by_category(t.metrics.trace_facts).values()) or sum(k.time_s for k in kernels)
        rows = [
            KernelRow(
                name=k.name if len(k.name) <= MAX_KERNEL_NAME else k.name[: MAX_KERNEL_NAME - 1] + "…",
                full_name=k.name,
                time=fmt_seconds(k.time_s),
                count=(f"{k.count:.0f}" if k.count >= 10 or k.count == int(k.count) else f"{k.count:.1f}") if k.count is not None else "—",
                share=fmt_percent(k.time_s / total) if total else "—",
            )
            for k in kernels[:MAX_KERNEL_ROWS]
        ]
        return rows, t.name
    return [], ""


def _cores(physical: int | None, logical: int | None) -> str:
    if physical and logical:
        return f" ({physical} physical / {logical} logical cores)"
    return f" ({logical} logical cores)" if logical else ""


def _environment(results: Results) -> list[Row]:
    env = results.environment
    rows = [
        Row(label="Device", value=f"{env.device_name} ({env.device_type}" + (f" × {env.device_count})" if env.device_count > 1 else ")")),
        Row(label="Compute capability", value=env.compute_capability or ""),
        Row(label="Device memory", value=fmt_bytes(env.device_memory_bytes) if env.device_memory_bytes else ""),
        Row(label="Driver / CUDA", value=" / ".join(v for v in (env.driver_version, env.cuda_version) if v)),
        Row(label="PyTorch", value=env.torch_version),
        Row(label="Python", value=env.python_version),
        Row(label="Platform", value=env.platform),
        Row(label="CPU", value=(env.cpu_model or "") + _cores(env.cpu_cores_physical, env.cpu_cores_logical)),
        Row(label="Host memory", value=fmt_bytes(env.host_memory_bytes) if env.host_memory_bytes else ""),
        Row(label="Host", value=env.hostname),
        Row(label="Datasheet peaks", value=", ".join(f"{k} {v:g} TFLOP/s" for k, v in env.datasheet_peaks_tflops.items())),
        Row(label="Datasheet", value=env.datasheet_source or ""),
        Row(label="Measured matmul ceiling", value=", ".join(f"{k} {v:g} TFLOP/s" for k, v in env.measured_ceiling_tflops.items())),
    ]
    rows += [Row(label=f"{k} (unavailable)", value=v) for k, v in env.unavailable.items()]
    return [r for r in rows if r.value.strip()]


def _workload(results: Results) -> list[Row]:
    w = results.workload
    rows = [
        Row(label="Name", value=w.name),
        Row(label="File", value=w.path),
        Row(label="SHA-256", value=w.sha256[:16] + "…" if len(w.sha256) > 16 else w.sha256),
        Row(label="Parameters", value=fmt_count(w.parameter_count) if w.parameter_count else ""),
    ]
    rows += [Row(label=str(k), value=str(v)) for k, v in w.declared.items()]
    return [r for r in rows if r.value.strip()]


def _from_report(trace_path: str, report_dir: Path | None) -> str:
    """The trace's path as seen from the report's folder (an absolute path made relative when it can be)."""
    path = Path(trace_path)
    if path.is_absolute() and report_dir is not None:
        try:
            path = Path(os.path.relpath(path, report_dir))
        except ValueError:  # another drive on Windows: keep the absolute path
            pass
    return path.as_posix()


def trace_href(trace_path: str, report_dir: Path | None) -> str:
    """A relative, percent-encoded link: no scheme can survive it (``javascript:`` becomes a file name)."""
    posix = PurePosixPath(_from_report(trace_path, report_dir))
    if posix.is_absolute():
        return "file://" + quote(str(posix))
    return quote(str(posix), safe="/") if str(posix) else ""


def _traces(results: Results, report_dir: Path | None) -> list[TraceLink]:
    return [
        TraceLink(trial=t.name, href=trace_href(t.metrics.trace_path, report_dir), label=_from_report(t.metrics.trace_path, report_dir))
        for t in results.trials
        if t.metrics and t.metrics.trace_path
    ]


# -------------------------------------------------------------------------------------- assembly


def _trace_diff(base: Trial | None, rec: Trial | None) -> list[TraceDiffRow]:
    """Where the time went between the baseline and the recommendation (both must have a trace)."""
    if base is None or rec is None or base is rec or not (base.metrics and rec.metrics):
        return []
    if not (base.metrics.trace_facts and rec.metrics.trace_facts):
        return []
    diff = diff_facts(base.metrics.trace_facts, rec.metrics.trace_facts)
    rows = [
        TraceDiffRow(category=c, baseline=f"{d['baseline'] * 1e3:.2f} ms", recommended=f"{d['other'] * 1e3:.2f} ms", change=f"{d['delta'] * 1e3:+.2f} ms")
        for c, d in diff["kernel_time_by_category"].items()
    ]
    if "gpu_idle_fraction" in diff:
        d = diff["gpu_idle_fraction"]
        rows.append(TraceDiffRow(category="GPU idle (share of step)", baseline=f"{d['baseline']:.1%}", recommended=f"{d['other']:.1%}", change=f"{d['delta'] * 100:+.1f} pts"))
    if "kernel_count_per_step" in diff:
        d = diff["kernel_count_per_step"]
        rows.append(TraceDiffRow(category="kernels (ops) per step", baseline=f"{d['baseline']:.0f}", recommended=f"{d['other']:.0f}", change=f"{d['delta']:+.0f}"))
    return rows


def _recommended_structure(results: Results, effects: dict[str, StructuralEffect]) -> list[str]:
    """What a stacked recommendation changed (a single knob's shows in its own row)."""
    sweep = results.sweep
    rec = sweep.recommended_trial if sweep else None
    if sweep is None or rec is None or rec not in effects or any(k.trial == rec for k in sweep.knobs):
        return []
    return effects[rec].lines()


def build_view(results: Results, *, report_dir: Path | None = None) -> ReportView:
    """Everything the templates show. ``report_dir`` makes absolute trace paths relative to the report."""
    base_name, rec_name = baseline_name(results), recommended_name(results)
    base = results.trial(base_name) if base_name else None
    rec = results.trial(rec_name) if rec_name else None
    story = build_story(results)
    if results.findings is None:
        state, ranked, flat = "not run", [], []
    else:
        ranked, flat = split_findings(results.findings)
        state = "present" if results.findings else "none"
    effects = knob_effects(results)
    knobs = _knob_rows(results, effects)
    charts, absent = build_charts(results, baseline=base_name, recommended=rec_name)
    findings = ranked_views(results, story, ranked)
    no_change = [_finding_view(i, f) for i, f in enumerate(flat, 1)]
    slices = step_breakdown(base.metrics) if base is not None and base.ok and base.metrics is not None else []
    marks = point_at_breakdown(findings, slices)
    point_at_breakdown(no_change, slices)
    for v in findings + no_change:
        dataset_cost(v, base)
    breakdown = baseline_breakdown_chart(slices, marks, base_name or "")
    if breakdown is not None:
        charts.insert(0, breakdown)
    sweep = results.sweep
    sweep_notes = list(sweep.notes) if sweep else []
    if sweep and sweep.stopped_early:
        sweep_notes.insert(0, f"The search stopped early: {sweep.stopped_early}.")
    if sweep and sweep.elapsed_s is not None:
        budget = f" of a {fmt_seconds(sweep.budget_s)} budget" if sweep.budget_s else ""
        sweep_notes.append(f"Search time {fmt_seconds(sweep.elapsed_s)}{budget}.")
    kernels, kernels_trial = _kernels(results, [base_name, rec_name])
    peak = results.peak
    env = results.environment
    headline = _tell(_headline(results, base, rec), story)
    headline.why = why_line(slices, findings)
    view = ReportView(
        title=results.workload.name or Path(results.workload.path).stem,
        created_at=results.created_at,
        perfscope_version=results.perfscope_version,
        source=results.source,
        device=env.device_name + (f" × {env.device_count}" if env.device_count > 1 else ""),
        peak=f"{peak.tflops:g} TFLOP/s ({peak.dtype})" if peak else "not measured",
        peak_source=peak.source if peak else "no peak known for this device; MFU is n/a (pass --peak-tflops)",
        headline=headline,
        findings_state=state,
        findings=findings,
        no_change=no_change,
        knobs=[k for k in knobs if k.status != "inapplicable"],
        inapplicable=[k for k in knobs if k.status == "inapplicable"],
        sweep_notes=sweep_notes,
        trials=_trial_rows(results, base_name, rec_name),
        failures=_failures(results),
        charts=charts,
        gain_chart=gain_chart(results),
        absent_charts=absent,
        kernels=kernels,
        kernels_trial=kernels_trial,
        trace_diff=_trace_diff(base, rec),
        environment=_environment(results),
        workload=_workload(results),
        traces=_traces(results, report_dir),
        command=shlex.join(results.command) if results.command else "",
        notes=list(results.notes),
        recommended_structure=_recommended_structure(results, effects),
        structure_notes=list(dict.fromkeys(n for e in effects.values() if not e.compared for n in e.notes)),
        warnings=list(results.warnings),
        breakdown=[SliceRow(label=x.label, time=fmt_seconds(x.seconds), share=f"{x.share * 100:.0f} %",
                            fixes=", ".join(f"#{r}" for r in marks.get(x.key, []))) for x in slices],
        distributed=distributed_view(results, baseline=base, recommended=rec),
        layout=layout_view(results),
    )
    if results.source == "trace":
        adapt_for_trace(view, results)
    return view

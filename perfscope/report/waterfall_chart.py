"""The MFU gap as one chart, one table and a few terminal lines (perfscope.results.waterfall computes it).

    wv = waterfall_view(results, ranked_findings)   # WaterfallView, None without a timed run
    wv.chart                                        # Chart: 100 % → each part → MFU, a plotly bar spec
    print("\\n".join(waterfall_lines(results)))      # what `perfscope trace` prints

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from perfscope import knobs
from perfscope.report.charts.base import BLUE, GREEN, GREY, ORANGE, PURPLE, RED, TEAL, Chart, axis_spec, layout_spec
from perfscope.report.escaping import plotly_text
from perfscope.report.format import fmt_seconds
from perfscope.results import Results
from perfscope.results.waterfall import PARTS, MfuWaterfall, WaterfallPart, mfu_waterfall
from perfscope.rules import all_rules, rule
from perfscope.wording import words

GROUP_COLORS = {"host idle": ORANGE, "exposed communication": PURPLE, "non-GEMM kernels": TEAL, "GEMM efficiency": RED,
                "recompute": "#9D755D", "padding": "#9D755D", "not split": GREY, "residual": GREY}


@dataclass(kw_only=True, slots=True)
class WaterfallRow:
    label: str
    points: str
    """"−21.5 pts", or "n/a"."""
    time: str
    evidence: str
    fixes: str
    """The rule and knob ids that act on the part, or why none does."""
    ranked: str
    """The ranked fixes of this report that act on it: "#1, #3"."""
    unavailable: str


@dataclass(kw_only=True, slots=True)
class WaterfallView:
    trial: str
    start: str
    """"100 % = ...": what the chart starts from."""
    end: str
    """"= MFU 32.1 %" (or the matmul share when MFU is unknown)."""
    rows: list[WaterfallRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chart: Chart | None = None


def part_fixes(key: str) -> tuple[str, ...]:
    """The rule and knob ids that act on a part: their `addresses` meet its slices, or their `gap_parts` name it."""
    # keyed by the registries' ids: a rule or knob registered at run time shows at once
    return _part_fixes(key, tuple(r.id for r in all_rules()), tuple(k.id for k in knobs.REGISTRY))


@cache
def _part_fixes(key: str, rule_ids: tuple[str, ...], knob_ids: tuple[str, ...]) -> tuple[str, ...]:
    slices = set(PARTS[key].slices)
    actors = [*(rule(i) for i in rule_ids), *(knobs.knob(i) for i in knob_ids)]
    return tuple(a.id for a in actors if set(a.addresses) & slices or key in a.gap_parts)


def _marks(wf: MfuWaterfall, findings: list[Any], knob_of: dict[str, str]) -> dict[str, list[int]]:
    """Part key -> ranks of the findings that act on it (``findings``: the report's FindingViews)."""
    out: dict[str, list[int]] = {}
    for p in wf.parts:
        if p.points is None:
            continue
        spec, fixes = p.spec, part_fixes(p.key)
        hits = [f.rank for f in findings
                if f.rule_id in fixes or knob_of.get(f.trial, "") in fixes or set(f.addresses_keys) & set(spec.slices)]
        if hits:
            out[p.key] = sorted(set(hits))
    return out


def _points(p: WaterfallPart) -> str:
    if p.points is None:
        return "n/a"
    return "0.0 pts" if abs(p.points) < 0.05 else f"{-p.points:+.1f} pts".replace("-", "−")


def _fixes(p: WaterfallPart) -> str:
    return "; ".join(words for words in (", ".join(part_fixes(p.key)), p.spec.no_fix) if words)


def waterfall_view(results: Results, findings: list[Any] | None = None) -> WaterfallView | None:
    """The view of the baseline's waterfall; None when the run has no timed step."""
    wf = mfu_waterfall(results)
    if wf is None:
        return None
    knob_of = {k.trial: k.knob for k in results.sweep.knobs if k.trial} if results.sweep else {}
    marks = _marks(wf, findings or [], knob_of)
    rows = [WaterfallRow(label=p.label, points=_points(p),
                         time=fmt_seconds(p.seconds) if p.seconds is not None else "",
                         evidence=p.evidence, fixes=_fixes(p), ranked=", ".join(f"#{r}" for r in marks.get(p.key, [])),
                         unavailable=words(p.unavailable) if p.unavailable else "") for p in wf.parts]
    start = f"100 % = {words(wf.denominator)}"
    end = f"{wf.end_label}: {wf.end_points:.1f} %"
    return WaterfallView(trial=wf.trial, start=start, end=end, rows=rows, notes=[words(n) for n in wf.notes],
                         chart=waterfall_figure(wf, marks))


def waterfall_figure(wf: MfuWaterfall, marks: dict[str, list[int]]) -> Chart | None:
    """100 % → one floating bar per measured part → the end bar; None when no part was measured."""
    shown = wf.available  # the residual too, even at 0: it is the identity's check, drawn
    if not [p for p in shown if p.key != "residual"]:
        return None
    start = "100 % (peak)" if wf.basis == "peak" else "100 % (step)"
    labels, bases, heights, colors, texts, hovers = [start], [0.0], [100.0], [GREY], ["100 %"], [plotly_text(words(wf.denominator))]
    level = 100.0
    for p in shown:
        pts = p.points or 0.0
        labels.append(plotly_text(p.label))
        bases.append(level - pts)
        heights.append(pts)
        colors.append(GROUP_COLORS.get(p.spec.group, BLUE))
        fix = marks.get(p.key)
        amount = "0.0" if abs(pts) < 0.05 else f"{-pts:+.1f}".replace("-", "−")
        texts.append(amount + (" · fix " + ", ".join(f"#{r}" for r in fix) if fix else ""))
        hovers.append(plotly_text(f"{p.spec.group}: {p.evidence}") + "<br>" + plotly_text("acts on it: " + _fixes(p)))
        level -= pts
    labels.append(plotly_text(wf.end_label))
    bases.append(0.0)
    heights.append(wf.end_points)
    colors.append(GREEN)
    texts.append(f"{wf.end_points:.1f} %")
    hovers.append(plotly_text(wf.end_label))
    figure = {
        "data": [{
            "type": "bar", "x": labels, "y": heights, "base": bases, "marker": {"color": colors},
            "text": texts, "textposition": "outside", "cliponaxis": False, "customdata": hovers,
            "hovertemplate": "%{x}<br>%{customdata}<extra></extra>",
        }],
        "layout": layout_spec("", "", height=380, margin={"l": 16, "r": 16, "t": 24, "b": 16}, showlegend=False, bargap=0.25,
                              xaxis=axis_spec("", tickangle=-30, showgrid=False),
                              yaxis=axis_spec("% of peak" if wf.basis == "peak" else "% of the step", range=[0, 108])),
    }
    missing = [f"{p.label} ({words(p.unavailable) if p.unavailable else ''})" for p in wf.parts if p.points is None]
    caption = (f"From 100 % ({words(wf.denominator)}) down to {wf.end_label} ({wf.end_points:.1f} %), each bar a measured share of "
               f"{wf.trial}'s step; the parts and the grey residual add up to the gap by construction "
               "(docs/measurement.md). Each bar names the ranked fixes that act on it (fix #N).")
    if missing:
        caption += " Not shown: " + "; ".join(missing) + "."
    return Chart(id="mfu-waterfall", title="The MFU gap, explained", caption=caption, figure=figure, wide=True)


def waterfall_lines(results: Results) -> list[str]:
    """The parts as terminal lines (`perfscope trace`, where the page is not at hand)."""
    wv = waterfall_view(results)
    if wv is None:
        return []
    width = max(len(r.label) for r in wv.rows)
    out = [f"MFU gap ({wv.trial}): {wv.start}"]
    for r in wv.rows:
        if r.points == "n/a":
            out.append(f"  {r.label:<{width}}  n/a: {r.unavailable}")
        else:
            time = f"{r.time:>10}" if r.time else " " * 10
            out.append(f"  {r.label:<{width}} {r.points:>11} {time}  acts on it: {r.fixes}")
    out.append(f"  = {wv.end}")
    return out + [f"  note: {n}" for n in wv.notes]

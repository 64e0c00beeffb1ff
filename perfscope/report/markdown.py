"""The Markdown summary (headline, ranked fixes, knobs, trials and failures) and the terminal's lines, for terminals
and CI logs.

    perfscope report perfscope-out/results.json --format md -o summary.md
    print(summary_table(results)); print(answer_lines(results, report_path))   # what `analyze` prints when it ends

Design notes: docs/report.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from perfscope.report.distributed import DistributedView
from perfscope.report.format import Cell, Table, fmt_bytes
from perfscope.report.headline import interval_words
from perfscope.report.lanes import LanesView
from perfscope.report.layout import LayoutView
from perfscope.report.view import FindingView, ReportView, build_view
from perfscope.report.waterfall_chart import WaterfallView
from perfscope.results import Results
from perfscope.rules._text import TRACE_ESTIMATE
from perfscope.wording import words

MAX_ERROR_LINES = 20
_MD_SPECIAL = re.compile(r"([\\`*<>|])")  # brackets stay: a link needs "](" or a definition we never emit


def md(text: object) -> str:
    """Inline text: Markdown/HTML punctuation backslash-escaped, newlines folded (keeps tables intact)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def code(text: object, *, in_table: bool = False) -> str:
    """An inline code span that survives backticks (longer fence) and pipes inside tables."""
    s = " ".join(str(text).split())
    if in_table:
        s = s.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or longest else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def block(text: str, lang: str = "") -> list[str]:
    """A fenced block whose fence is longer than any backtick run inside (so the text cannot close it)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *text.rstrip("\n").splitlines(), fence]


def _table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    sep = ["---:" if a == "r" else "---" for a in align]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |", *("| " + " | ".join(r) + " |" for r in rows)]


def _cell(c: Cell) -> str:
    text = code(c.text, in_table=True) if c.code else md(c.text)
    return text + "".join(f" **{md(t)}**" for t in c.tags) + (f" ({md(c.note)})" if c.note else "")


def _grid(t: Table) -> list[str]:
    """A Table of the view as it is (its page twin: reports/templates/_table.html.j2); nothing without rows."""
    return _table(t.header, [[_cell(c) for c in row] for row in t.rows], list(t.align)) + [""] if t.rows else []


def _finding(f: FindingView) -> list[str]:
    gain = f"{f.gain_text} ({f.gain_kind}{', ' + f.interval if f.interval else ''})" if f.gain_text else f"gain {f.gain_kind}"
    lines = [f"### {f.rank}. {md(f.title)} — {md(gain)}", ""]
    meta = f"rule {code(f.rule_id)} · severity {f.severity}"
    if f.trial:
        meta += f" · trial {code(f.trial)}"
    if f.gain_kind == "estimated" and f.estimate_method:
        meta += f" · estimated by {md(f.estimate_method)}"
    lines += [meta, ""]
    if f.addresses:
        lines += [f"Addresses: {md(f.addresses)}", ""]
    if f.estimate_bound:
        lines += [f"{'Bounded by' if f.gain_kind == 'estimated' else 'Limit'}: {md(f.estimate_bound)}", ""]
    lines += [f"- {md(e)}" for e in f.evidence]
    if f.evidence:
        lines.append("")
    if f.dataset_cost:
        lines += [md(f.dataset_cost_caption) + ":", ""] + _grid(f.dataset_cost)
    if f.fix:
        lines += block("\n".join(line.text for line in f.fix), "diff") + [""]
    if f.caveats:
        lines += ["> **Changes semantics:** " + "; ".join(md(c) for c in f.caveats), ""]
    if f.reference_text:
        lines += [f"Reference: {md(f.reference_text)}", ""]
    return lines


def _structure(view: ReportView) -> list[str]:
    """What each knob changed in the step (counted, perfscope.report.structure), next to its gain: a list, not
    another table column, so the knob table stays readable in a terminal."""
    rows = [k for k in view.knobs if k.structure]
    if not rows and not view.recommended_structure and not view.structure_notes:
        return []
    out = ["**What each knob changed in the step** (counted from the structural fingerprints, against the baseline):", ""]
    for k in rows:
        out.append(f"- {code(k.knob)} ({md(k.gain)}): " + "; ".join(md(s) for s in k.structure)
                   + "".join(f" — {md(n)}" for n in k.structure_notes))
    if view.recommended_structure:
        out.append("- the recommended stack: " + "; ".join(md(s) for s in view.recommended_structure))
    out += [f"- not shown: {md(n)}" for n in view.structure_notes]
    return out + [""]


def _distributed(d: DistributedView | None) -> list[str]:
    """The data-parallel section, compact: the launch in one line, every rank, communication, the sharding table."""
    if d is None:
        return []
    out = ["## Distributed", "", f"Trial {code(d.trial)}: " + " · ".join(f"{md(f.label)} {md(f.value)}" for f in d.launch), ""]
    out += _grid(d.ranks) + [f"- **Straggler** {md(s)}" for s in d.stragglers] + ([""] if d.stragglers else [])
    if d.straggler_method:
        out += [f"Stragglers: {md(d.straggler_method)}", ""]
    if d.communication:
        out += ["Communication vs compute per step: " + "; ".join(f"{md(f.label.lower())} {md(f.value)}" for f in d.communication), ""]
    out += _grid(d.collectives)
    if d.sharding.rows:
        out += ["Training state per rank by strategy (the memory model; measured where a run used it):", ""] + _grid(d.sharding)
    return out + [md(n) for n in d.notes] + ([""] if d.notes else [])


def _waterfall(w: WaterfallView | None) -> list[str]:
    """The MFU gap part by part (perfscope.report.waterfall_chart): the waterfall chart as a table."""
    if w is None:
        return []
    rows = [[md(r.label), md(r.points), md(r.time or "—"), md(r.ranked or "—"), md(r.fixes), md(r.unavailable or r.evidence)]
            for r in w.rows]
    out = ["### The MFU gap, explained", "", md(w.start), ""]
    out += _table(["Part", "Points", "Per step", "Ranked fixes", "Acts on it", "Evidence / why unavailable"], rows,
                  ["l", "r", "r", "l", "l", "l"])
    return out + ["", f"**{md(w.end)}**", ""] + [f"- {md(n)}" for n in w.notes] + ([""] if w.notes else [])


def layout_markdown(view: LayoutView | None) -> list[str]:
    """The layout search's section (perfscope.report.layout): the measured layouts, the pruned ones, each pipeline's bubble."""
    if view is None:
        return []
    out = ["## Layouts", "", f"World size {view.world_size}; a rank may hold {md(view.memory_limit)}. {md(view.method)}", ""]
    out += _grid(view.measured) + (["Pruned, not measured:", ""] + _grid(view.pruned) if view.pruned.rows else [])
    out += [f"- {md(p)}" for p in view.pipelines] + ([""] if view.pipelines else [])
    return out + [md(n) for n in view.notes] + ([""] if view.notes else [])


def lanes_markdown(view: LanesView | None) -> list[str]:
    """A parallel sweep's section (perfscope.report.lanes): the time it took, and each lane."""
    if view is None:
        return []
    return ["## Lanes", "", md(view.summary), ""] + _grid(view.lanes) + [f"- {md(n)}" for n in view.notes] + ([""] if view.notes else [])


def render_view_markdown(view: ReportView) -> str:
    out = [f"# perfscope report: {md(view.title)}", ""]
    out += [f"Device: {md(view.device)} · Peak: {md(view.peak)} ({md(view.peak_source)})" + (f" · Run: {md(view.created_at)}" if view.created_at else ""), ""]

    h = view.headline
    out += ["## Summary", ""]
    if h.message:
        out += [md(h.message), ""]
    else:
        if h.recommendation:
            out += [f"**Recommendation: {md(h.recommendation)}**" + (f" — {md(h.gain)}" if h.gain else ""), ""]
            facts = [("Gain", md("none decided: " + h.closest) if h.closest else ""),
                     (h.settings_label, (" + " if h.settings_label == "Settings" else ", ").join(code(x) for x in h.settings)),
                     ("Measured against", md(h.reference)),
                     ("Noise", md(h.noise)), ("Changes", md("; ".join(h.caveats))), ("Why slow", md(h.why))]
            out += [f"- {label}: {value}" for label, value in facts if value] + [""]
            if h.alternative:
                out += [f"> {md(h.alternative)}", ""]
        elif h.lead:
            out += [md(h.lead), ""]
        out += [f"> **Warning:** {md(w)}" for w in view.warnings] + ([""] if view.warnings else [])
        header = ["Metric", *(f"{md(c.text)} ({code(c.note, in_table=True)})" for c in h.columns)]
        both = len(h.columns) > 1
        if both:
            header.append("Change")
        rows = []
        for r in h.rows:
            cells = [md(r.label), *(md(c.text + (f" ({c.note})" if c.note else "")) for c in r.values)]
            if both:
                cells.append(md(r.change))
            rows.append(cells)
        out += _table(header, rows, ["l"] + ["r"] * (len(header) - 1)) + [""]
    out += [md(n) for n in view.notes] + ([""] if view.notes else [])

    out += ["## Ranked fixes", ""]
    if view.findings_state == "not run":
        out += ["Not measured: the rules did not run for these results.", ""]
    elif not view.findings:
        out += ["No fix with a significant or estimated gain was found.", ""]
    for f in view.findings:
        out += _finding(f)
    if view.breakdown.rows:
        out += ["### Where the baseline's step time goes", ""] + _grid(view.breakdown)
    out += _waterfall(view.waterfall)
    if view.no_change:
        out += ["### Measured, did not help here", ""]
        out += [f"- {md(f.title)} ({code(f.rule_id)}): {md(f.gain_text)}, {md(f.interval)}" + (f" — {md(f.why_not_here)}" if f.why_not_here else "")
                for f in view.no_change] + [""]

    if view.knobs or view.inapplicable:
        out += ["## Knobs tried one at a time", ""]
        rows = [
            [code(k.knob, in_table=True), md(k.status), md(k.setting), md(k.gain + ("" if k.significant is not False else " (n.s.)")), md(k.interval),
             md(k.reference), md(k.mfu), md("; ".join(k.semantics) or "—"), md(k.reason)]
            for k in view.knobs
        ]
        out += _table(["Knob", "Status", "Setting", "Gain", "Interval", "Reference", "MFU", "Semantics changes", "Reason"], rows,
                      ["l", "l", "l", "r", "r", "l", "r", "l", "l"]) + [""]
    out += _structure(view)
    if view.inapplicable:
        # One line, not a table: these knobs mean nothing on this run (Markdown has no folding without raw HTML).
        out += [f"Did not apply to this run ({len(view.inapplicable)}): " + "; ".join(f"{code(k.knob)} ({md(k.reason)})" for k in view.inapplicable), ""]
    out += [md(n) for n in view.sweep_notes] + ([""] if view.sweep_notes else [])
    out += lanes_markdown(view.lanes)

    out += _distributed(view.distributed)
    out += layout_markdown(view.layout)

    if view.trace_diff.rows:
        out += ["## Where the time went (baseline → recommended, from the traces)", ""] + _grid(view.trace_diff)

    out += ["## Trials", ""] + _grid(view.trials)

    if view.failures:
        out += ["## Failed and skipped trials", ""]
        for f in view.failures:
            lines = f.error.splitlines()
            text = "\n".join(lines[-MAX_ERROR_LINES:])  # the end of a traceback says the most
            if len(lines) > MAX_ERROR_LINES:
                text = f"… ({len(lines) - MAX_ERROR_LINES} earlier lines omitted)\n" + text
            out += [f"- {code(f.name)} — **{md(f.status)}** ({md(f.knobs)})", ""] + ["  " + line for line in block(text)] + [""]

    if view.command:
        out += ["## Reproduce", ""] + block(view.command, "sh") + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def render_markdown(results: Results) -> str:
    return render_view_markdown(build_view(results))


def top_finding(results: Results, evidence: int = 4) -> str:
    """The first ranked finding as the terminal shows it first: its title and gain, its first evidence lines, its fix;
    "" when there is none."""
    views = build_view(results).findings
    if not views:
        return ""
    f = views[0]
    gain = f"{f.gain_text} ({f.gain_kind})" if f.gain_text else f"gain {f.gain_kind}"
    lines = [f"Top finding: {f.title} — {gain}  [{f.rule_id}]"]
    shown = [e for e in f.evidence if e != TRACE_ESTIMATE]  # "(estimated)" and the summary say it
    lines += [f"- {e}" for e in shown[:evidence]]
    if f.estimate_bound:
        lines.append(f"- bounded by: {f.estimate_bound}")
    if f.fix:
        lines += ["", *(line.text for line in f.fix)]
    return "\n".join(lines)


def summary_headline(results: Results) -> str:
    """The Markdown summary's title line and its Summary section: what a command prints to the terminal."""
    lines = render_markdown(results).splitlines()
    start = lines.index("## Summary") if "## Summary" in lines else 0
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join([lines[0], "", *lines[start:end]]).rstrip("\n")


def summary_table(results: Results) -> str:
    """One row per run: throughput (work / wall time), typical step, MFU, data wait, memory."""
    env = results.environment
    lines = [f"\n{results.workload.name} on {env.device_name} ({env.device_type})"]
    header = (f"{'run':<30} {'status':<9} {'samples/s':>10} {'typical step ms (p10-p90)':<26} "
              f"{'MFU':>7} {'data wait':>9} {'peak mem':>10}")
    lines += [header, "-" * len(header)]
    for t in results.trials:
        m = t.metrics
        if m is None or t.status not in ("ok", "nonfinite"):
            reason = (t.error or "").splitlines()[0][:60] if t.error else ""
            lines.append(f"{t.name:<30} {t.status:<9} {reason}")
            continue
        st = m.typical_step
        typical = f"{st.median * 1e3:.1f} ({st.p10 * 1e3:.1f}-{st.p90 * 1e3:.1f})" if st else "n/a"
        rate = f"{m.samples_per_s:.1f}" if m.samples_per_s is not None else "n/a"
        mfu = f"{m.mfu:.1%}" if m.mfu is not None else "n/a"
        status = "excluded" if t.excluded else t.status
        lines.append(f"{t.name:<30} {status:<9} {rate:>10} {typical:<26} {mfu:>7} {m.data_wait_share:>9.1%} "
                     f"{fmt_bytes(m.peak_memory_bytes):>10}")
    if results.peak is not None:
        lines.append(f"MFU against {results.peak.tflops:g} TFLOP/s ({results.peak.source})")
    return "\n".join(lines)


def answer_lines(results: Results, report_path: Path | None) -> str:
    """What to do, in the headline's words and numbers (perfscope.report.headline), then where to read more."""
    lines = [""]
    lines += [f"warning: {words(w)}" for w in results.warnings]
    view = build_view(results)
    h = view.headline  # the story's lines, as the page's summary says them (perfscope.report.headline.tell)
    if view.story is not None:
        r = view.story.recommended
        lines.append(f"recommendation: {h.recommendation}" + (f" ({interval_words(r.gain)}; {h.reference})" if r else ""))
        said = [h.caveats and "  changes: " + "; ".join(h.caveats), h.noise and f"  {h.noise}", h.alternative,
                h.closest and f"  {h.closest}"]
        lines += [line for line in said if line]
    if why := h.why:  # the page's own line: the breakdown's largest slice and its fix
        lines.append(f"why slow: {why}")
    lines.append(f"results: {report_path.parent / 'results.json' if report_path else ''}".rstrip())
    if report_path is not None:
        lines.append(f"report:  {report_path}")
    return "\n".join(lines)

"""The gate's outputs: a terminal table, a Markdown summary ($GITHUB_STEP_SUMMARY) and JUnit XML.

    print(render_table(report)); write_text("gate.md", render_markdown(report))

The only module of the gate that formats anything; it reads a GateReport and decides nothing.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from perfscope.check.decision import Verdict
from perfscope.check.gate import GateReport
from perfscope.results.io import write_text  # noqa: F401 - re-exported for the CLI
from perfscope.results.messages import msg
from perfscope.wording import words

HEADLINE = {
    "pass": "PASS: no regression",
    "regression": "REGRESSION",
    "inconclusive": "INCONCLUSIVE: too few or too noisy samples to decide (not a pass)",
    "not_comparable": "NOT COMPARABLE: another kind of machine or software than the baseline's (not a pass)",
    "unusable": "NOT COMPARED: unusable input",
}
_ICON = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️", "not_comparable": "↔️", "unusable": "⛔"}
COLUMNS = ("metric", "baseline", "current", "change", "interval", "runs (cur/base)", "resolves", "verdict")


def _cells(v: Verdict) -> tuple[str, ...]:
    fmt = v.metric.format
    return (
        v.metric.title,
        fmt(v.baseline) if v.baseline is not None else "-",
        fmt(v.current) if v.current is not None else "-",
        f"{v.change:+.1%}" if v.change is not None else "-",
        f"{v.low:+.1%} .. {v.high:+.1%}" if v.low is not None and v.high is not None else "-",
        f"{v.n_current}/{v.n_baseline}",
        f"±{v.mde:.0%}" if v.mde is not None else "-",
        v.status.upper(),
    )


def _title(report: GateReport) -> str:
    cur = report.current_trial or report.options.trial
    base = report.baseline_trial or report.options.trial
    return (
        f"perfscope check: {report.current_source or 'current'} (trial {cur}) vs "
        f"{report.baseline_source or 'baseline'} (trial {base}), max drop {report.options.max_drop:.1%}"
    )


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One line of "not compared": ``detail`` lines belong to the line above them (each refusing difference under
    "not comparable"), so each renderer nests them its own way without reading the text."""

    text: str
    detail: bool = False


def _problems(report: GateReport) -> list[Problem]:
    """Why nothing was compared: input errors, then the differences that refused the comparison."""
    if report.outcome == "not_comparable":
        said = msg("not_comparable", changes=[d.change for d in report.blocking_differences])
        return [Problem(text=words(said)),
                *(Problem(text=words(d.message), detail=True) for d in report.blocking_differences)]
    if report.outcome != "unusable":
        return []
    lines = [Problem(text=words(e.message)) for e in report.errors]
    if report.blocking_differences and not report.options.allow_mismatch:
        lines.append(Problem(text=words(msg("runs_not_comparable"))))
        lines += [Problem(text=words(d.message), detail=True) for d in report.blocking_differences]
    return lines


def _problem_lines(report: GateReport) -> list[str]:
    return [f"  {p.text}" if p.detail else p.text for p in _problems(report)]


def _structure_lines(report: GateReport) -> list[str]:
    """The structural diff in words, one change a line; [FAIL] marks what a --fail-on-structure gate fails on."""
    diff = report.structure
    if diff is None:
        return []
    gates = ", ".join(str(g) for g in diff.gates)
    head = "structure (exact, from the fingerprints" + (f"; failing on {gates}" if gates else "") + "):"
    if not diff.compared:
        return [head, *(f"  not compared: {n}" for n in diff.notes)]
    lines = [head]
    lines += [f"  {'[FAIL] ' if c.failed else ''}{words(c.message)}" for c in diff.changes]
    if not diff.changes:
        lines.append("  no structural change")
    lines += [f"  note: {n}" for n in diff.notes]
    return lines


def render_table(report: GateReport) -> str:
    lines = [_title(report)]
    lines += [f"warning: {w}" for w in report.warnings]
    if report.verdicts:
        rows = [COLUMNS, *(_cells(v) for v in report.verdicts)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
        for i, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines += [f"  {words(v.message)}" for v in report.verdicts]
        lines += [f"  (secondary, not deciding: per-step Mann-Whitney p = {v.step_p_value:.2g} for {v.metric.title})"
                  for v in report.verdicts if v.step_p_value is not None]
    lines += _structure_lines(report)
    lines += _problem_lines(report)
    lines.append(HEADLINE[report.outcome])
    return "\n".join(lines)


def _md(text: str) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened, HTML angle brackets neutralized."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def render_markdown(report: GateReport) -> str:
    outcome = report.outcome
    lines = [f"## {_ICON[outcome]} perfscope check: {HEADLINE[outcome]}", "", _md(_title(report)), ""]
    if report.verdicts:
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        lines += ["| " + " | ".join(_md(c) for c in _cells(v)) + " |" for v in report.verdicts]
        lines.append("")
        lines += [f"- {_md(words(v.message))}" for v in report.verdicts]
    structure = _structure_lines(report)
    if structure:
        lines += ["", f"**{_md(structure[0].rstrip(':'))}:**", ""]
        lines += [f"- {_md(line.strip())}" for line in structure[1:]]
    problems = _problems(report)
    if problems:
        lines += ["", "**Not compared:**", ""]
        lines += [f"  - {_md(p.text)}" if p.detail else f"- {_md(p.text)}" for p in problems]
    if report.warnings:
        lines += ["", "**Warnings:**", ""] + [f"- {_md(w)}" for w in report.warnings]
    return "\n".join(lines) + "\n"


# XML 1.0 forbids most control characters even escaped; an error message quoting a traceback can hold them.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def render_junit(report: GateReport) -> str:
    """One testcase per gated metric: <failure> on regression, <error> when inconclusive or not compared."""
    suite = ET.Element("testsuite", name="perfscope check")
    classname = _xml(f"perfscope.check.{report.current_trial or report.options.trial}")
    if report.outcome in ("unusable", "not_comparable"):
        case = ET.SubElement(suite, "testcase", classname=classname, name="comparability", time="0")
        summary = " ".join(p.text for p in _problems(report))
        kind = "not-comparable" if report.outcome == "not_comparable" else "unusable"
        error = ET.SubElement(case, "error", type=kind, message=_xml(summary))
        error.text = _xml("\n".join(_problem_lines(report)))
    for v in report.verdicts:
        case = ET.SubElement(suite, "testcase", classname=classname, name=v.metric.id, time="0")
        said = _xml(words(v.message))
        if v.status == "regression":
            ET.SubElement(case, "failure", type="regression", message=said).text = said
        elif v.status == "inconclusive":
            ET.SubElement(case, "error", type="inconclusive", message=said).text = said
        else:
            ET.SubElement(case, "system-out").text = said
    structure = _structure_lines(report)
    compared = report.structure is not None and report.structure.compared
    if structure and compared and report.outcome not in ("unusable", "not_comparable"):
        case = ET.SubElement(suite, "testcase", classname=classname, name="structure", time="0")
        text = _xml("\n".join(structure))
        if report.structure_failed:
            failed = "; ".join(words(c.message) for c in report.structure.failed) if report.structure else ""
            ET.SubElement(case, "failure", type="structure", message=_xml(failed)).text = text
        else:
            ET.SubElement(case, "system-out").text = text
    for key, path in (("tests", "testcase"), ("failures", "testcase/failure"), ("errors", "testcase/error")):
        suite.set(key, str(len(suite.findall(path))))  # counted from the cases written above
    suite.set("skipped", "0")
    if report.warnings:
        ET.SubElement(suite, "system-err").text = _xml("\n".join(f"warning: {w}" for w in report.warnings))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

"""The gate and the report decide on typed codes, never on message text: one test per code path, and the proof
that rewording a note or an error changes no behaviour."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

import perfscope.check.structure as check_structure
from perfscope.check import GateOptions, run_gate
from perfscope.check.compat import Difference
from perfscope.check.gate import ErrorCode, GateError, GateReport, PeakKind, peak_kind
from perfscope.check.render import render_junit, render_markdown, render_table
from perfscope.check.structure import NoteCode, StructureNote, diff_fingerprints, parse_structure_gates
from perfscope.report.structure import EAGER_COUNT_NOTE, knob_effects
from perfscope.results import Peak, msg
from perfscope.results.fingerprint import CompileFacts, Fingerprint, MemoryPeak, SyncSite
from tests.factories import contended, make_results, make_runs
from tests.test_report_structure import BASE, _results

COMPILED = CompileFacts(graphs=1, graph_breaks=0)


def _fp(**changes: object) -> Fingerprint:
    return dataclasses.replace(copy.deepcopy(BASE), **changes)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- structural notes


@pytest.mark.parametrize(("base", "cur", "gates", "code", "side"), [
    (_fp(), _fp(syncs=[SyncSite(op="aten::_local_scalar_dense (.item())", site="train.py:50", count=1)]), "",
     NoteCode.MOVED_SYNC_SITES, "both"),
    (_fp(), _fp(compile=COMPILED), "", NoteCode.NOT_COMPILED, "baseline"),
    (_fp(compile=COMPILED), _fp(), "", NoteCode.NOT_COMPILED, "current"),
    (None, _fp(), "", NoteCode.NO_FINGERPRINT, "baseline"),
    (_fp(), None, "", NoteCode.NO_FINGERPRINT, "current"),
    (_fp(memory=MemoryPeak(bytes=2**30, tolerance=0.01, source="t")), _fp(), "memory", NoteCode.MEMORY_NOT_GATED, "current"),
    (_fp(), _fp(), "memory", NoteCode.MEMORY_NOT_GATED, "both"),
], ids=["moved-sites", "baseline-not-compiled", "current-not-compiled", "no-baseline-fingerprint", "no-current-fingerprint",
        "memory-one-side", "memory-both-sides"])
def test_each_structural_note_carries_its_code_and_side(base, cur, gates, code, side):
    diff = diff_fingerprints(base, cur, parse_structure_gates(gates) if gates else ())
    assert [(n.code, n.side) for n in diff.notes] == [(code, side)]
    assert str(diff.notes[0]) == diff.notes[0].text and diff.notes[0].text


def test_the_gate_notes_runs_whose_fingerprints_differ_by_code():
    runs = make_runs(runs=4)
    for i, t in enumerate(runs):
        t.metrics.fingerprint = _fp(op_calls=100 + (i == 0))  # one run counted one op more
    report = run_gate(make_results(copy.deepcopy(runs)), make_results(runs), GateOptions(between_session=0.0))
    assert report.structure is not None
    differ = [n for n in report.structure.notes if n.code is NoteCode.FINGERPRINTS_DIFFER]
    assert {n.side for n in differ} == {"baseline", "current"}


def test_the_report_hides_the_baselines_not_compiled_note_by_code_whatever_its_words(monkeypatch):
    compiled = _fp(compile=CompileFacts(graphs=2, graph_breaks=0))
    original = check_structure._compile

    def reworded(base, cur):
        changes, notes = original(base, cur)
        return changes, [dataclasses.replace(n, message=msg("text", text="reworded: eager on one side")) for n in notes]

    monkeypatch.setattr(check_structure, "_compile", reworded)
    assert knob_effects(_results({"baseline": BASE, "amp_bf16": compiled}))["amp_bf16"].notes == [EAGER_COUNT_NOTE]
    # the current side's note is kept, in its (new) words
    effect = knob_effects(_results({"baseline": compiled, "amp_bf16": BASE}))["amp_bf16"]
    assert effect.notes == [msg("text", text="reworded: eager on one side")]


# ----------------------------------------------------------------------------- gate errors


def test_a_baseline_without_evidence_is_unusable_by_code():
    base = make_runs(runs=3)
    for t in base:
        t.excluded = contended()
    report = run_gate(make_results(make_runs(runs=3)), make_results(base), GateOptions(between_session=0.0))
    assert report.outcome == "unusable" and [e.code for e in report.errors] == [ErrorCode.NO_EVIDENCE]


def test_the_outcome_depends_on_the_codes_not_the_words():
    report = GateReport(options=GateOptions())
    report.error(ErrorCode.NO_RUN, msg("text", text=""))
    assert report.outcome == "unusable"
    same = msg("text", text="any words")
    assert GateError(code=ErrorCode.NO_RUN, message=same) != GateError(code=ErrorCode.NO_EVIDENCE, message=same)


# ----------------------------------------------------------------------------- rendering "not compared"


def test_refusing_differences_nest_under_their_line_by_type_not_by_leading_spaces():
    report = GateReport(options=GateOptions())
    report.error(ErrorCode.METRIC_UNAVAILABLE, msg("text", text="  mfu: indented words are still a top-level error"))
    report.differences = [Difference(what="device name", baseline="'A'", current="'B'", blocking=True)]
    md = render_markdown(report)
    assert re.search(r"^- +mfu: indented words are still a top-level error", md, flags=re.M)  # not nested under a line
    assert "\n  - device name: baseline 'A', current 'B'" in md
    table = render_table(report)
    assert "\n  device name: baseline 'A', current 'B'" in table
    assert "device name: baseline 'A', current 'B'" in render_junit(report)


def test_structure_notes_render_as_their_words():
    report = GateReport(options=GateOptions(fail_on_structure=parse_structure_gates("sync")))
    note = StructureNote(code=NoteCode.NO_FINGERPRINT, message=msg("text", text="no print"))
    report.structure = check_structure.StructureDiff(compared=False, notes=[note])
    assert "  not compared: no print" in render_table(report)
    assert report.structure.summary() == msg("structure_not_compared", notes=[note.message])


# ----------------------------------------------------------------------------- the MFU peak's kind


@pytest.mark.parametrize(("peak", "datasheet", "measured", "kind"), [
    (Peak(tflops=2.0, dtype="user", source="any words"), {}, {"fp32": 2.0}, PeakKind.USER),
    (Peak(tflops=989.4, dtype="bf16", source="any words"), {"bf16": 989.4}, {"bf16": 700.0}, PeakKind.DATASHEET),
    (Peak(tflops=0.55, dtype="fp32", source="any words"), {}, {"fp32": 0.55}, PeakKind.MEASURED_CEILING),
    (Peak(tflops=3.0, dtype="fp32", source="measured matmul ceiling"), {}, {"fp32": 0.55}, PeakKind.UNKNOWN),
    (None, {}, {}, None),
])
def test_a_peaks_kind_is_read_from_its_numbers_not_its_words(peak, datasheet, measured, kind):
    results = make_results([])
    results.peak = peak
    results.environment.datasheet_peaks_tflops, results.environment.measured_ceiling_tflops = datasheet, measured
    assert peak_kind(results) is kind


def test_measured_ceilings_are_compared_on_the_baselines_whatever_their_source_says():
    base = make_results(make_runs(seed=1, run_cv=0.015), device_type="cpu")  # a quiet runner: 5 v 5 runs exclude 5%
    cur = make_results(make_runs(seed=2, run_cv=0.015), device_type="cpu")
    for results, tflops in ((base, 0.80), (cur, 0.55)):
        results.peak = Peak(tflops=tflops, dtype="fp32", source="reworded: this machine's own matmul")
        results.environment.measured_ceiling_tflops = {"fp32": tflops}
    report = run_gate(cur, base, GateOptions(between_session=0.0, metrics=("mfu",)))
    assert report.outcome == "pass" and msg("shared_measured_ceiling") in report.notes

"""The report says what each knob changed in the step, next to its gain: the CI gate's diff of the knob's
fingerprint against the baseline's (one diff implementation), what torch.compile made, and the exposed data wait
DataLoader workers removed (measured, marked so)."""

from __future__ import annotations

import copy

from perfscope.check.structure import diff_fingerprints
from perfscope.report.html import render_html
from perfscope.report.markdown import render_markdown
from perfscope.report.structure import EAGER_COUNT_NOTE, NO_CHANGE, knob_effects, structural_effect
from perfscope.report.view import build_view
from perfscope.results.fingerprint import CompileFacts, Fingerprint, SyncSite
from perfscope.results.messages import msg
from perfscope.wording import words
from tests.factories import make_full_results

BASE = Fingerprint(method="t", flops=1000.0, flops_by_op={"aten::mm": 1000.0}, op_calls=100,
                   ops={"aten::mm": 10, "aten::add_": 90}, matmul_flops_by_dtype={"fp32": 1000.0},
                   syncs=[SyncSite(op="aten::_local_scalar_dense (.item())", site="train.py:42", count=1)])


def _bf16() -> Fingerprint:
    fp = copy.deepcopy(BASE)
    fp.matmul_flops_by_dtype = {"bf16": 1000.0}
    fp.ops = {**fp.ops, "aten::_to_copy": 20}
    fp.op_calls += 20
    return fp


def _results(prints: dict[str, Fingerprint | None]):
    """make_full_results with a fingerprint on every successful run of the named configurations."""
    results = make_full_results()
    for trial in results.trials:
        if trial.ok and trial.configuration in prints:
            trial.metrics.fingerprint = copy.deepcopy(prints[trial.configuration])
    return results


def test_a_knobs_structural_change_is_the_ci_gates_diff_in_its_words():
    results = _results({"baseline": BASE, "amp_bf16": _bf16(), "channels_last": BASE, "dataloader_workers": BASE,
                        "recommended": _bf16()})
    effects = knob_effects(results)
    expected = [c.message for c in diff_fingerprints(BASE, _bf16()).changes]
    assert effects["amp_bf16"].counted == expected
    assert [m.code for m in expected] == ["structure_dtypes", "structure_op_calls"]
    assert effects["amp_bf16"].lines() == [words(m) for m in expected]
    assert effects["channels_last"].lines() == [words(NO_CHANGE)]
    # workers change nothing in the step: what they remove is the data wait, timed and marked so
    (moved,) = effects["dataloader_workers"].measured
    assert moved.code == "data_wait_moved" and moved.params["before"] > moved.params["after"]
    assert effects["dataloader_workers"].lines() == [words(msg("measured_change", change=moved))]
    assert structural_effect(results, "baseline") is None and "torch_compile" not in effects  # crashed: no run


def test_what_torch_compile_made_is_said_and_the_eager_count_explained():
    compiled = copy.deepcopy(BASE)
    compiled.compile = CompileFacts(graphs=2, graph_breaks=1, break_reasons={"Call to `torch._dynamo.graph_break()`": 1})
    results = _results({"baseline": BASE, "amp_bf16": compiled})
    effect = knob_effects(results)["amp_bf16"]
    assert effect.counted == [msg("compile_facts", graphs=2, graph_breaks=1, reasons=["Call to `torch._dynamo.graph_break()`"],
                                  recompiles=0)]
    assert effect.notes == [EAGER_COUNT_NOTE]  # not "the baseline is not compiled": it need not be


def test_results_without_fingerprints_say_why_once_and_keep_the_measured_line():
    view = build_view(_results({}))
    rows = {k.knob: k for k in view.knobs}
    assert rows["amp_bf16"].structure == [] and rows["dataloader_workers"].structure == [
        "exposed data wait 18% → 2% of wall time (measured)"]
    said = msg("configuration_no_fingerprint", name="baseline", baseline=True)
    assert {tuple(e.notes) for e in knob_effects(_results({})).values()} == {(said,)}
    assert view.structure_notes == [words(said)]  # once for the whole table
    only_base = _results({"baseline": BASE})
    assert knob_effects(only_base)["recommended"].notes == [msg("configuration_no_fingerprint", name="recommended",
                                                                baseline=False)]
    assert words(knob_effects(only_base)["recommended"].notes[0]) in build_view(only_base).structure_notes


def test_html_and_markdown_show_each_knobs_change_next_to_its_gain_and_the_stacks():
    stacked = _bf16()
    stacked.syncs = []
    results = _results({"baseline": BASE, "amp_bf16": _bf16(), "channels_last": BASE, "dataloader_workers": BASE,
                        "recommended": stacked})
    view = build_view(results)
    amp = next(k for k in view.knobs if k.knob == "amp_bf16")
    assert amp.structure[0] == "matmul FLOPs in bf16 0% → 100% (fp32 100% → 0%)"
    assert view.recommended_structure[0] == "-1 host sync per step: aten::_local_scalar_dense (.item()) at train.py:42 (1 → 0)"
    markdown = render_markdown(results)
    assert f"- `amp_bf16` ({amp.gain}): matmul FLOPs in bf16 0% → 100% (fp32 100% → 0%); op calls per step" in markdown
    assert "- the recommended stack: -1 host sync per step" in markdown
    html = render_html(results)
    row = html[html.index("<code>amp_bf16</code><span class=\"sub\">"):]
    row = row[:row.index("</tr>")]
    assert amp.gain in row and "<div>matmul FLOPs in bf16 0% → 100% (fp32 100% → 0%)</div>" in row
    assert "The recommended stack changed in the step" in html


def test_call_sites_and_break_reasons_stay_text():
    hostile = copy.deepcopy(BASE)
    hostile.syncs = [SyncSite(op="aten::nonzero", site="<script>alert(1)</script>|x.py:1", count=1)]
    results = _results({"baseline": BASE, "amp_bf16": hostile})
    assert "<script>alert(1)" not in render_html(results)
    line = next(line for line in render_markdown(results).splitlines() if line.startswith("- `amp_bf16`"))
    assert "\\<script\\>" in line and "\\|x.py:1" in line


def test_the_baselines_fingerprint_is_derived_once_for_every_knob(monkeypatch):
    import perfscope.report.structure as structure

    results = _results({"baseline": BASE, "amp_bf16": _bf16(), "channels_last": BASE, "dataloader_workers": BASE})
    asked: list[str] = []
    real = structure.configuration_fingerprint
    monkeypatch.setattr(structure, "configuration_fingerprint", lambda r, name: asked.append(name) or real(r, name))
    effects = knob_effects(results)
    assert len(effects) >= 3 and asked.count("baseline") == 1


def test_a_configuration_whose_runs_disagree_is_noted_by_name_as_the_gate_notes_a_side():
    """The report's rows render check's one diff (`diff_sides`): the gate's fingerprints-differ note, naming the
    configuration instead of the side."""
    results = _results({"baseline": BASE, "amp_bf16": _bf16()})
    other = copy.deepcopy(next(t for t in results.trials if t.configuration == "amp_bf16"))
    other.name, other.metrics.fingerprint = "amp_bf16-r2", copy.deepcopy(BASE)
    results.trials.append(other)
    effect = knob_effects(results)["amp_bf16"]
    assert effect.notes[0] == msg("fingerprints_differ", role="amp_bf16", runs=2, variants=2)

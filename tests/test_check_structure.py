"""The structural gate: each variant of tests/workloads/structure_variants.py is named by its change's code and fails
under its own --fail-on-structure kind only; identical fingerprints name nothing; the gate's outputs carry the diff
(the changes' words: tests/test_wording_catalogues.py)."""

from __future__ import annotations

# between_session=0.0: both files are one setup; the session term is tests/test_check_sessions.py's.
import copy

import pytest

from perfscope.check import GateOptions, run_gate
from perfscope.check.gate import ErrorCode
from perfscope.check.render import render_junit, render_markdown, render_table
from perfscope.check.structure import KINDS, NoteCode, diff_fingerprints, parse_structure_gates
from perfscope.results.fingerprint import CopyStat, Fingerprint, MemoryPeak
from perfscope.results.messages import msg
from perfscope.wording import words
from tests.factories import make_results, make_runs
from tests.test_fingerprint import ITEM_LINE
from tests.test_fingerprint import _fingerprint as fingerprint

ITEM = "aten::_local_scalar_dense (.item())"
VARIANTS = {
    # variant: (precision, compile, kind it must fail, the code and parameters it must say)
    "item": ("fp32", None, "sync", "structure_syncs",
             {"op": ITEM, "sites": [f"tests/workloads/structure_variants.py:{ITEM_LINE}"], "before": 0, "after": 1}),
    "extra_matmul": ("fp32", None, "flops", "structure_flops", {"before": 292864.0, "after": 489472.0}),
    "fp32_head": ("bf16", None, "dtype", "structure_dtypes", {"before": {"bf16": 1.0}, "moved": ["bf16", "fp32"]}),
    "graph_break": ("fp32", "default", "graph-breaks", "structure_graph_breaks",
                    {"before": 0, "after": 1, "reasons": {"Call to `torch._dynamo.graph_break()`": 1}}),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_is_named_and_fails_under_its_kind_only(variant):
    precision, compile, kind, code, params = VARIANTS[variant]
    base, cur = fingerprint("base", precision, compile), fingerprint(variant, precision, compile)
    diff = diff_fingerprints(base, cur, parse_structure_gates(kind))
    messages = [c.message for c in diff.changes]
    assert any(m.code == code and all(m.params[k] == v for k, v in params.items()) for m in messages), messages
    assert [c.kind for c in diff.failed] == [kind], messages
    others = ",".join(k for k in KINDS if k not in (kind, "ops", "flops"))  # an extra matmul also adds ops
    assert not diff_fingerprints(base, cur, parse_structure_gates(others)).failed


def test_an_extra_matmul_names_its_op_calls_too():
    diff = diff_fingerprints(fingerprint("base"), fingerprint("extra_matmul"), parse_structure_gates("ops"))
    (ops,) = [c for c in diff.changes if c.kind == "ops"]
    assert ops.failed and ops.message.code == "structure_op_calls" and ops.message.params["delta"]["aten::t"] == 5


def test_identical_code_names_nothing_and_passes_every_gate():
    base, same = fingerprint("base"), fingerprint("base", repeat=1)
    diff = diff_fingerprints(base, same, parse_structure_gates(",".join(KINDS)))
    assert diff.changes == [] and diff.failed == [] and diff.compared
    assert diff.summary() == msg("no_structural_change_found")


def test_thresholds_tolerate_amounts():
    base, extra = fingerprint("base"), fingerprint("extra_matmul")  # FLOPs +67%
    assert diff_fingerprints(base, extra, parse_structure_gates("flops:70%")).failed == []
    assert diff_fingerprints(base, extra, parse_structure_gates("flops:60%")).failed
    assert diff_fingerprints(fingerprint("base"), fingerprint("item"), parse_structure_gates("sync:1")).failed == []
    half = diff_fingerprints(fingerprint("base", "bf16"), fingerprint("fp32_head", "bf16"), parse_structure_gates("dtype:15%"))
    assert half.failed == [] and half.changes  # named, not failed: 10 points lost, 15 tolerated


def test_improvements_are_named_but_never_fail():
    diff = diff_fingerprints(fingerprint("item"), fingerprint("base"), parse_structure_gates(",".join(KINDS)))
    assert [(c.message.code, c.message.params["after"]) for c in diff.changes] == [("structure_syncs", 0)] and not diff.failed


def test_bad_gate_specs_are_refused_with_the_known_kinds():
    with pytest.raises(ValueError, match="graph-breaks"):
        parse_structure_gates("syncs")
    with pytest.raises(ValueError, match="threshold"):
        parse_structure_gates("flops:lots")
    assert [str(g) for g in parse_structure_gates("sync, flops:5%,ops:20")] == ["sync", "flops:5%", "ops:20"]


def test_memory_changes_within_the_recorded_tolerance_are_not_changes():
    base = Fingerprint(method="t", memory=MemoryPeak(bytes=1000 * 2**20, tolerance=0.02, source="t"))
    within, beyond = copy.deepcopy(base), copy.deepcopy(base)
    within.memory.bytes, beyond.memory.bytes = 1015 * 2**20, 1100 * 2**20
    assert diff_fingerprints(base, within, parse_structure_gates("memory")).changes == []
    (change,) = diff_fingerprints(base, beyond, parse_structure_gates("memory")).failed
    assert change.message == msg("structure_memory", before=1000 * 2**20, after=1100 * 2**20, tolerance=0.02)
    assert not diff_fingerprints(base, beyond, parse_structure_gates("memory:15%")).failed


def test_a_new_pageable_copy_is_named_with_its_bytes():
    base = Fingerprint(method="t", copies={"h2d pinned": CopyStat(count=2, bytes=4096)})
    cur = Fingerprint(method="t", copies={"h2d pinned": CopyStat(count=2, bytes=4096), "h2d pageable": CopyStat(count=1, bytes=3 * 2**20)})
    (change,) = diff_fingerprints(base, cur, parse_structure_gates("copies")).failed
    assert change.message == msg("structure_copies", kind="h2d pageable", counts=[0, 1], sizes=[0, 3 * 2**20])


def test_kernel_launches_are_an_ops_change():
    base = Fingerprint(method="t", kernel_launches={"compute kernels": 312})
    cur = Fingerprint(method="t", kernel_launches={"compute kernels": 655})
    (change,) = diff_fingerprints(base, cur, parse_structure_gates("ops")).failed
    assert change.message == msg("structure_launches", name="compute kernels", before=312, after=655)


# ------------------------------------------------------------------------------------- the gate


def _results(fp: Fingerprint, *, median_s: float = 0.1, seed: int = 0):
    runs = make_runs(median_s=median_s, runs=5, seed=seed)
    for run in runs:
        run.metrics.fingerprint = copy.deepcopy(fp)
    return make_results(runs)


def test_the_gate_fails_on_structure_alone_and_every_output_carries_the_diff():
    base, cur = _results(fingerprint("base")), _results(fingerprint("item"), seed=1)
    named = run_gate(cur, base, GateOptions(between_session=0.0, max_drop=0.5))
    assert named.outcome == "pass" and named.structure is not None and len(named.structure.changes) == 1
    report = run_gate(cur, base, GateOptions(between_session=0.0, max_drop=0.5, fail_on_structure=parse_structure_gates("sync")))
    assert report.outcome == "regression"
    table, markdown, junit = render_table(report), render_markdown(report), render_junit(report)
    said = words(report.structure.changes[0].message)
    assert f"[FAIL] {said}" in table and said in markdown
    assert 'name="structure"' in junit and '<failure type="structure"' in junit and said in junit


def test_a_timing_regression_says_its_structural_cause_or_that_none_was_found():
    base = _results(fingerprint("base"))
    slower_same = run_gate(_results(fingerprint("base"), median_s=0.15, seed=2), base, GateOptions(between_session=0.0, metrics=("samples_per_s",)))
    (verdict,) = slower_same.verdicts
    assert verdict.status == "regression" and verdict.message.code == "verdict_with_structure"
    assert verdict.message.params["structure"] == msg("no_structural_change_found")
    slower_item = run_gate(_results(fingerprint("item"), median_s=0.15, seed=2), base, GateOptions(between_session=0.0, metrics=("samples_per_s",)))
    structure = slower_item.verdicts[0].message.params["structure"]
    assert structure.code == "structural_changes" and [c.code for c in structure.params["changes"]] == ["structure_syncs"]
    # every output carries the explanation with the verdict, not only the structure list
    for rendered in (render_table(slower_item), render_markdown(slower_item), render_junit(slower_item)):
        assert words(structure) in rendered
    assert '<failure type="regression" message="samples/s' in render_junit(slower_item)


def test_a_slowdown_the_noise_cannot_confirm_also_gets_its_explanation():
    noisy = [1.0, 1.35, 0.7, 1.25, 0.75]
    base = make_results(make_runs(median_s=0.1, run_factors=noisy))
    for run in base.trials:
        run.metrics.fingerprint = copy.deepcopy(fingerprint("base"))
    cur = make_results(make_runs(median_s=0.125, run_factors=noisy[:3], seed=3))
    for run in cur.trials:
        run.metrics.fingerprint = copy.deepcopy(fingerprint("item"))
    (verdict,) = run_gate(cur, base, GateOptions(between_session=0.0, metrics=("samples_per_s",))).verdicts
    assert verdict.status == "inconclusive" and verdict.change < -0.05
    assert verdict.message.code == "verdict_with_structure"
    assert verdict.message.params["structure"].params["changes"][0].params["op"] == ITEM
    (faster,) = run_gate(base, cur, GateOptions(between_session=0.0, metrics=("samples_per_s",))).verdicts
    assert faster.message.code == "verdict"  # a faster run needs no explanation


def test_a_structural_gate_without_a_fingerprint_is_unusable_not_a_pass():
    base = make_results(make_runs(runs=5))
    report = run_gate(_results(fingerprint("base")), base, GateOptions(between_session=0.0, fail_on_structure=parse_structure_gates("sync")))
    assert report.outcome == "unusable" and [e.code for e in report.errors] == [ErrorCode.STRUCTURE_NOT_COMPARED]
    assert [(n.code, n.side) for n in report.structure.notes] == [(NoteCode.NO_FINGERPRINT, "baseline")]
    assert run_gate(_results(fingerprint("base")), base, GateOptions(between_session=0.0)).outcome != "unusable"  # no gate: a note only


def test_runs_agree_though_only_one_was_traced_and_their_allocator_peaks_move():
    """On CUDA, analyze traces one run of the baseline (kernel launches) and the allocator peak moves within its
    tolerance: five runs of identical code are still one fingerprint, with the traced run's launches."""
    from perfscope.results.fingerprint import consensus

    runs = []
    for i, peak in enumerate((1000, 1003, 998, 1001, 1002)):
        fp = Fingerprint(method="t", op_calls=10, memory=MemoryPeak(bytes=peak * 2**20, tolerance=0.02, source="t"),
                         unavailable={"kernel_launches": msg("kernel_launches_from_trace")})
        if i == 0:
            fp.kernel_launches, fp.unavailable = {"compute kernels": 312}, {}
        runs.append(fp)
    picked = consensus(runs)
    chosen = picked.fingerprint
    assert picked.variants == 1 and picked.runs == 5 and chosen.kernel_launches == {"compute kernels": 312} and chosen.unavailable == {}
    assert chosen.memory.bytes == 1001 * 2**20  # the median peak
    other = copy.deepcopy(runs[1])
    other.op_calls = 11
    assert consensus([*runs, other]).variants == 2 and consensus([*runs, other]).fingerprint.op_calls == 10


def test_a_sync_every_n_steps_is_named_from_the_window_and_periodic_phase_is_no_change():
    from perfscope.results.fingerprint import SyncSite, WindowSyncs, consensus

    base = Fingerprint(method="t", window_syncs=WindowSyncs(steps=40, sites={}))
    every10 = Fingerprint(method="t", window_syncs=WindowSyncs(steps=40, sites={"train.py:42": 4}))
    (change,) = diff_fingerprints(base, every10, parse_structure_gates("sync")).failed
    assert change.message == msg("structure_window_syncs", site="train.py:42", before=0.0, after=0.1,
                                 counts=[[0, 40], [4, 40]])
    assert not diff_fingerprints(base, every10, parse_structure_gates("sync:1")).failed
    # identical code: windows of other lengths and phases hold one occurrence more or less: no change
    same = Fingerprint(method="t", window_syncs=WindowSyncs(steps=43, sites={"train.py:42": 5}))
    assert diff_fingerprints(every10, same).changes == []
    # a per-step sync the counted step names is not named again from the window
    step_base = copy.deepcopy(base)
    per_step = Fingerprint(method="t", syncs=[SyncSite(op="aten::_local_scalar_dense (.item())", site="train.py:42", count=1)],
                           op_calls=1, ops={"aten::_local_scalar_dense": 1}, window_syncs=WindowSyncs(steps=40, sites={"train.py:42": 40}))
    assert [c.message.code for c in diff_fingerprints(step_base, per_step).changes] == ["structure_syncs"]
    # runs pool their windows: more steps resolve rarer syncs
    picked = consensus([every10, same])
    pooled = picked.fingerprint
    assert picked.variants == 1 and pooled.window_syncs.steps == 83 and pooled.window_syncs.sites == {"train.py:42": 9}

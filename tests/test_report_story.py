"""The report tells one story: the headline, the ranked fixes, the knob table, the gain chart and the terminal
agree on what to do and show the same numbers for it."""

from __future__ import annotations

import copy
import re

from perfscope.report.html import render_html
from perfscope.report.markdown import answer_lines, render_markdown
from perfscope.report.view import build_view
from perfscope.results import Gain, KnobOutcome, Results, RunNoise, Sweep
from perfscope.results.messages import msg
from perfscope.rules import run_rules
from perfscope.wording import words
from tests.factories import make_full_results, make_results, make_trial


def _gain(ratio: float, verdict: str, runs: int = 3) -> Gain:
    return Gain(ratio=ratio, low=ratio * 0.9, high=ratio * 1.1, confidence=0.99, verdict=verdict, runs=runs, reference_runs=6)  # type: ignore[arg-type]


def cpu_quick_start() -> Results:
    """The quick start on a 2-core CPU: nothing that keeps the global batch is faster, a bigger micro-batch is."""
    trials = [make_trial("baseline")] + [make_trial(n, seed=i) for i, n in enumerate(("mb32", "amp_bf16", "compile"), 1)]
    results = make_results(trials, device_type="cpu")
    results.environment.host_memory_bytes = 8 * 2**30
    results.sweep = Sweep(baseline_trial="baseline", recommended_trial="baseline", noise=RunNoise(runs=6, sigma=0.05, mde=0.12), knobs=[
        KnobOutcome(knob="micro_batch", title="micro-batch size", status="measured", trial="mb32", setting="micro-batch 32 × accumulation 1",
                    gain=_gain(1.37, "faster"), changes_semantics=[msg("global_batch", before=8, after=32)],
                    code_change="-loader = DataLoader(ds, batch_size=B)\n+loader = DataLoader(ds, batch_size=MICRO)"),
        KnobOutcome(knob="amp_bf16", title="bf16 autocast", status="measured", trial="amp_bf16", setting="precision bf16",
                    gain=_gain(0.06, "slower"), changes_semantics=[msg("numerics", change=msg("bf16_matmuls"))]),
        KnobOutcome(knob="compile", title="torch.compile", status="measured", trial="compile", setting="compile default", gain=_gain(0.99, "undecided")),
        KnobOutcome(knob="tf32", title="TF32", status="inapplicable", reason=[msg("knob_inapplicable", why="TF32 is a tensor-core mode of NVIDIA GPUs")]),
    ])
    results.findings = run_rules(results)
    return results


def one_knob_recommended() -> Results:
    """The recommendation is one knob, re-measured: its outcome's early figure differs from the recommendation's."""
    trials = [make_trial("baseline"), make_trial("fused_optimizer", seed=1)]
    results = make_results(trials)
    results.sweep = Sweep(baseline_trial="baseline", recommended_trial="fused_optimizer", recommended_knobs=["fused_optimizer"],
                          recommended_gain=_gain(1.21, "faster", runs=4), knobs=[
        KnobOutcome(knob="fused_optimizer", title="fused optimizer", status="measured", trial="fused_optimizer", setting="fused=True",
                    gain=_gain(1.30, "faster", runs=2), code_change="+opt = AdamW(params, fused=True)"),
    ])
    results.findings = run_rules(results)
    return results


def test_the_headline_names_keep_and_the_faster_option_that_changes_semantics():
    results = cpu_quick_start()
    view = build_view(results)
    h = view.headline
    assert h.recommendation.startswith("Keep your configuration")
    assert "micro-batch 32 × accumulation 1" in h.alternative and "1.37× faster" in h.alternative
    (caveat,) = next(o for o in results.sweep.knobs if o.trial == "mb32").changes_semantics
    assert caveat == msg("global_batch", before=8, after=32) and f"caveat: {words(caveat)}" in h.alternative
    # The ranked list starts with exactly that option, with the same numbers.
    first = view.findings[0]
    assert first.trial == "mb32" and first.gain_text == "1.37× faster" and first.interval in h.alternative
    assert "baseline" in h.reference and "±5.0%" in h.noise and "6 baseline runs" in h.noise
    # Measured as slower or undecided: never ranked, listed apart with the reason.
    assert {f.trial for f in view.findings}.isdisjoint({"amp_bf16", "compile"})
    assert {f.trial for f in view.no_change} == {"amp_bf16", "compile"}


def test_headline_numbers_are_the_ranked_lists_and_the_tables():
    for results in (one_knob_recommended(), make_full_results()):
        view = build_view(results)
        h, first = view.headline, view.findings[0]
        assert first.recommended and first.rank == 1
        assert h.gain == f"{first.gain_text} ({first.interval})"
        assert next(r for r in h.rows if r.label == "Throughput").change == first.gain_text
        for row in view.knobs:
            if row.trial == results.sweep.recommended_trial:
                assert row.gain == first.gain_text and row.interval in first.interval
        md = render_markdown(results)
        assert h.gain in md and md.count(first.gain_text) >= 2
    view = build_view(one_knob_recommended())
    assert view.headline.gain.startswith("1.21× faster")  # all the recommendation's runs, not the outcome's early 1.30×
    assert view.headline.settings == ["fused optimizer: fused=True"] and "4 runs against 6 baseline runs" in view.headline.reference
    assert [k.setting for k in view.knobs] == ["fused=True"]


def test_first_screen_has_answer_then_gain_chart_and_folds_inapplicable_knobs():
    results = cpu_quick_start()
    html = render_html(results)
    answer, chart, kpis = html.index('id="answer"'), html.index('id="chart-gains"'), html.index('class="kpis"')
    assert answer < chart < kpis and html.index('id="alternative"') < chart
    assert re.search(r'<details class="card" id="inapplicable"[^>]*>\s*<summary>1 knob did not apply', html)
    view = build_view(results)
    # the ranking's order (perfscope.ranking.knob_key), the gain chart's: the fixture lists them unsorted
    assert [k.knob for k in view.knobs] == ["micro_batch", "compile", "amp_bf16"] and [k.knob for k in view.inapplicable] == ["tf32"]
    (trace,) = view.gain_chart.figure["data"]
    assert trace["x"] == sorted(trace["x"], reverse=True) and len(trace["x"]) == 3  # every measured configuration, best first
    assert any("slower" in t for t in trace["text"]) and any("n.s." in t for t in trace["text"])
    assert view.gain_chart.figure["layout"]["shapes"][0]["x0"] == 1  # the 1.0 line


def test_no_empty_chart_and_gpu_charts_on_a_cpu_run_are_one_line():
    view = build_view(cpu_quick_start())
    assert any("used no GPU" in line for line in view.absent_charts)
    for chart in view.charts:
        assert any(v is not None for t in chart.figure["data"] for v in (t.get("x") or []) + (t.get("y") or [])), chart.id
    assert "used no GPU" in render_html(cpu_quick_start())


def test_memory_is_labelled_by_what_it_is():
    cpu = build_view(cpu_quick_start()).headline
    assert any(r.label == "Peak memory (host RSS)" and "host memory" in r.values[0].note for r in cpu.rows)
    gpu = build_view(make_full_results())
    assert any(r.label == "Peak memory (allocator peak)" for r in gpu.headline.rows)
    memory = next(c for c in gpu.charts if c.id == "mb-memory")
    assert "allocator peak" in memory.figure["layout"]["yaxis"]["title"]["text"]


def test_the_terminal_ends_with_the_headlines_answer(tmp_path):
    results = cpu_quick_start()
    view = build_view(results)
    text = answer_lines(results, tmp_path / "report.html")
    assert view.headline.recommendation in text and view.headline.alternative in text
    assert text.rstrip().endswith(f"report:  {tmp_path / 'report.html'}")
    rec = one_knob_recommended()
    assert "1.21× faster (99 % CI [1.09, 1.33]" in answer_lines(rec, None) and build_view(rec).headline.gain.startswith("1.21× faster (99 % CI [1.09, 1.33]")


def test_no_code_change_of_a_cpu_run_mentions_cuda():
    """Every rule and every knob, on a CPU run: the advice is written for the CPU."""
    from perfscope.knobs import REGISTRY, KnobContext
    from perfscope.results import ModelFacts
    from perfscope.results.config import TrialConfig
    from perfscope.workload import Workload
    from tests.rules.test_rules import CASES

    results = cpu_quick_start()
    ctx = KnobContext(workload=Workload(model=lambda: None, loss=lambda m, b: None, dataset=list, batch_size=8),
                      base=TrialConfig(device="cpu", micro_batch_size=8), environment=results.environment,
                      model=ModelFacts(parameter_count=1000, has_conv2d=True, repeated_blocks=4, optimizer_class="AdamW"))
    for knob in REGISTRY:
        change = knob.code_change(ctx)
        results.sweep.knobs.append(KnobOutcome(knob=knob.id, title=knob.title, status="measured", trial=f"t-{knob.id}",
                                               gain=_gain(1.5, "faster"), code_change=change))
        assert change is None or "cuda" not in change.lower(), (knob.id, change)
    findings = run_rules(results)
    for make_case, _ in CASES.values():  # every rule's firing fixture, moved to a CPU
        case = make_case()
        case.environment.device_type = "cpu"
        case.sweep = copy.deepcopy(results.sweep) if case.sweep is None else case.sweep
        findings += run_rules(case)
    assert findings
    for f in findings:
        assert "cuda" not in f.fix.lower(), (f.rule_id, f.fix)
    assert "cuda" not in "".join(line for line in render_markdown(results).split("```diff")[1:]).lower()

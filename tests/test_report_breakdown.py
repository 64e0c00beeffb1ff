"""Why slow, at a glance: the baseline's step-time breakdown is the first chart, each ranked fix names the slice it
addresses, the chart marks that slice with the fix's rank, and the answer says why the step is slow."""

from __future__ import annotations

import re

from perfscope.report.html import render_html
from perfscope.report.markdown import render_markdown
from perfscope.report.view import build_view
from perfscope.results import DatasetProfile, ProfiledFunction
from perfscope.results.breakdown import addressed, step_breakdown
from perfscope.rules import run_rules
from tests.factories import make_full_results
from tests.test_report_story import cpu_quick_start


def _data_bound():
    """The quick start's CPU run made data-bound: 70% of the step waits for data, the Dataset profiled."""
    results = cpu_quick_start()
    base = results.trial("baseline")
    base.metrics.data_wait_share = 0.7
    base.metrics.dataset_profile = DatasetProfile(
        kind="map", samples=64, batch_size=8, getitem_s=0.008, threads=2, getitem_one_thread_s=0.009, collate_s=0.001,
        profiled_s=0.6, method="test", top=[
            ProfiledFunction(function="{built-in method torch._C._fft.fft_irfft2}", calls=384, self_s=0.27, cumulative_s=0.27, self_share=0.45),
            ProfiledFunction(function="examples/cpu_heavy_dataset.py:23(__getitem__)", calls=64, self_s=0.07, cumulative_s=0.6, self_share=0.11)])
    results.environment.cpu_cores_usable = 2.0
    results.findings = run_rules(results)
    return results


def test_the_baseline_breakdown_is_the_first_chart_and_marks_the_fixes_that_address_each_slice():
    results = _data_bound()
    view = build_view(results)
    chart = view.charts[0]
    assert chart.id == "baseline-breakdown" and chart.wide
    slices = step_breakdown(results.trial("baseline").metrics)
    (trace,) = chart.figure["data"]
    assert trace["x"] == [s.seconds * 1e3 for s in slices]
    for f in view.findings:
        hit = addressed(slices, f.addresses_keys)
        if not hit or "step" in f.addresses_keys:
            continue
        assert f.addresses.startswith(" + ".join(s.label for s in hit))
        for s in hit:  # the chart names the fix on each slice it acts on
            text = trace["text"][slices.index(s)]
            assert re.search(rf"fix .*#{f.rank}\b", text), (f.rank, text)
    data_fix = next(f for f in view.findings if f.rule_id == "PS201")
    assert data_fix.addresses.startswith("data wait: ") and "70 % of the baseline's step" in data_fix.addresses
    assert f"fix #{data_fix.rank}" in trace["text"][0] and trace["marker"]["color"][0] != trace["marker"]["color"][-1]


def test_the_answer_says_why_the_step_is_slow_and_points_at_the_fix():
    view = build_view(_data_bound())
    data_fix = next(f for f in view.findings if f.rule_id == "PS201")
    assert view.headline.why.startswith("data wait is 70 % of the baseline's step")
    assert f"fix #{data_fix.rank} addresses it" in view.headline.why
    html = render_html(_data_bound())
    assert html.index('id="why"') < html.index('id="chart-gains"')  # on the first screen, above the gain chart
    assert 'href="#chart-baseline-breakdown"' in html


def test_the_data_loader_finding_shows_where_the_dataset_spends_its_time():
    results = _data_bound()
    view = build_view(results)
    data_fix = next(f for f in view.findings + view.no_change if f.rule_id == "PS201")
    rows = [[c.text for c in row] for row in data_fix.dataset_cost.rows]
    assert [r[0] for r in rows] == ["torch._C._fft.fft_irfft2", "__getitem__ (examples/cpu_heavy_dataset.py:23)"]
    assert rows[0][1:3] == ["45 %", "4.2 ms"]  # share; self time per sample: 0.27 s / 64 samples
    html = render_html(results)
    assert 'class="dataset-cost"' in html and "torch._C._fft.fft_irfft2" in html
    md = render_markdown(results)
    assert "Where \\_\\_getitem\\_\\_" in md or "Where __getitem__" in md
    assert "`torch._C._fft.fft_irfft2`" in md
    # Without a profile (hooks, --no-trace), no table: the finding says how to profile instead.
    results.trial("baseline").metrics.dataset_profile = None
    results.findings = run_rules(results)
    assert all(not f.dataset_cost for f in build_view(results).findings)


def test_estimates_show_their_bound_next_to_their_method():
    view = build_view(_data_bound())
    estimated = [f for f in view.findings if f.gain_kind == "estimated"]
    assert estimated and all(f.estimate_method and f.estimate_bound for f in estimated)
    html = render_html(_data_bound())
    assert "bounded by" in html


def test_keeping_the_baseline_shows_its_settings_and_the_closest_measured_option():
    view = build_view(cpu_quick_start())
    h = view.headline
    assert h.settings_label == "Your settings" and h.settings[0] == "micro-batch 8 × accumulation 1" and "fp32" in h.settings
    # micro-batch changes semantics (the alternative), bf16 was slower: compile (0.99×, undecided) came closest.
    assert h.closest.startswith("closest measured: torch.compile") and "99 % CI" in h.closest and "not significant" in h.closest
    html = render_html(cpu_quick_start())
    assert html.index('id="closest"') < html.index('id="settings"') < html.index('id="reference"') < html.index('id="chart-gains"')


def test_a_gpu_run_splits_the_breakdown_by_what_the_trace_saw():
    view = build_view(make_full_results())
    chart = view.charts[0]
    assert chart.id == "baseline-breakdown"
    labels = chart.figure["data"][0]["y"]
    assert labels[0] == "data wait" and "matmul" in labels


def test_the_markdown_has_the_breakdown_as_a_table_with_the_fixes():
    results = _data_bound()
    view = build_view(results)
    data_fix = next(f for f in view.findings if f.rule_id == "PS201")
    md = render_markdown(results)
    assert "### Where the baseline's step time goes" in md
    assert re.search(rf"\| data wait \| \d+\.\d ms \| 70 % \| #{data_fix.rank}\b", md)

"""The report: view model decisions, chart specs, files written, Markdown, template lookup."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import plotly.graph_objects as go
import pytest

from perfscope.cli import main
from perfscope.ranking import partition_findings
from perfscope.report import (
    facts,
    render_html,
    render_markdown,
    write_report,
)
from perfscope.report import html as html_page
from perfscope.report.charts import MAX_POINTS_PER_CHART, build_charts
from perfscope.report.view import (
    baseline_name,
    build_view,
    diff_lines,
    recommended_name,
    trace_href,
)
from perfscope.results import Finding, Gain, KernelStat, Results, UtilizationSample
from perfscope.results.messages import msg
from perfscope.wording import words
from tests.factories import (
    make_full_results,
    make_results,
    make_trace_facts,
    make_trial,
    make_utilization,
)

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------- view model


def test_single_baseline_without_sweep_or_findings_renders_baseline_only():
    view = build_view(make_results())
    assert [c.text for c in view.headline.columns] == ["Baseline"]
    assert view.headline.gain == "" and view.knobs == [] and view.findings_state == "not run"
    labels = [r.label for r in view.headline.rows]
    assert labels == ["MFU", "Step time (wall / steps)", "Throughput", "Peak memory (allocator peak)"]
    assert all(len(r.values) == 1 and r.change == "" for r in view.headline.rows)
    html = render_html(make_results())
    assert "Not measured: the rules did not run" in html
    assert "One configuration measured" in html


def test_empty_findings_list_means_nothing_found_not_not_run():
    results = make_results()
    results.findings = []
    assert build_view(results).findings_state == "none"
    assert "No fix with a significant or estimated gain" in render_markdown(results)


def test_missing_mfu_shows_na_with_its_reason():
    trial = make_trial()
    trial.metrics.mfu = None
    trial.metrics.unavailable["mfu"] = msg("no_peak")
    results = make_results([trial], device_type="cpu")
    results.peak = None
    view = build_view(results)
    mfu = view.headline.rows[0].values[0]
    assert mfu.text == "n/a" and words(msg("no_peak")) in mfu.note  # the reason, worded
    assert view.peak == "not measured"
    assert "mfu" not in [c.id for c in view.charts]
    assert "n/a" in render_markdown(results)


def test_baseline_and_recommended_roles():
    results = make_full_results()
    assert baseline_name(results) == "baseline" and recommended_name(results) == "recommended"
    view = build_view(results)
    assert [c.note for c in view.headline.columns] == ["baseline", "recommended"]
    step = next(r for r in view.headline.rows if r.label.startswith("Step time"))
    assert step.change.endswith("faster") and step.better is True
    assert "p10–p90" in step.values[0].note
    assert view.headline.gain.startswith("1.8") and "99 % CI" in view.headline.gain
    assert view.story.recommended.knobs == ["amp_bf16", "dataloader_workers"]
    assert any(r.label == "Tokens" for r in view.headline.rows)  # tokens/s present in the factory
    roles = {row[0].text: (row[0].tags, mark) for row, mark in zip(view.trials.rows, view.trials.marks, strict=True)}
    assert roles["baseline"] == (["baseline"], "role-baseline") and roles["recommended"] == (["recommended"], "role-recommended")


def test_failed_baseline_says_so_instead_of_numbers():
    results = make_results([make_trial("baseline", status="crashed")])
    view = build_view(results)
    assert "did not complete" in view.headline.message and view.headline.rows == []
    assert [f.status for f in view.failures] == ["crashed"]


def test_findings_split_measured_estimated_and_not_significant():
    view = build_view(make_full_results())
    # The recommendation (bf16 + workers, stacked) is item 1 with the stack's gain; its knobs' findings fold into it.
    assert [f.gain_kind for f in view.findings] == ["measured", "estimated"]
    assert [f.rank for f in view.findings] == [1, 2]
    assert view.findings[0].recommended and view.findings[0].title.startswith("Apply together: ")
    estimated = view.findings[1]
    assert estimated.gain_text.startswith("≈") and "micro-benchmark" in estimated.estimate_method
    assert view.findings[0].interval.startswith("99 % CI [")
    assert [f.rule_id for f in view.no_change] == ["PS140"]
    assert view.findings[0].reference_url == "https://pytorch.org/docs/stable/amp.html"


def test_partition_findings_keeps_unquantified_findings_ranked():
    flat = Finding(rule_id="a", title="a", severity="low", evidence=[], fix="", gain=Gain(ratio=1.0, low=0.9, high=1.1, confidence=0.99, verdict="undecided"))
    info = Finding(rule_id="b", title="b", severity="info", evidence=[], fix="")
    assert partition_findings([flat, info]) == ([info], [flat])


def test_diff_lines_classify_like_a_diff_viewer():
    kinds = [d.kind for d in diff_lines("--- a.py\n+++ b.py\n@@ x @@\n-old\n+new\n same\n")]
    assert kinds == ["ctx", "ctx", "hunk", "del", "add", "ctx"]


def test_knob_table_and_failures():
    view = build_view(make_full_results())
    by_knob = {k.knob: k for k in view.knobs}
    assert by_knob["amp_bf16"].semantics == [words(msg("numerics", change=msg("bf16_matmuls")))] and by_knob["amp_bf16"].significant
    assert by_knob["channels_last"].significant is False
    assert by_knob["torch_compile"].status == "failed" and "crashed" in by_knob["torch_compile"].reason
    assert {f.status for f in view.failures} == {"crashed", "skipped", "oom"}
    assert "triton not found" in next(f.error for f in view.failures if f.status == "crashed")


def test_trace_links_are_relative_and_inert(tmp_path):
    assert trace_href("traces/a b.json.gz", None) == "traces/a%20b.json.gz"
    assert trace_href(str(tmp_path / "traces" / "x.json.gz"), tmp_path) == "traces/x.json.gz"
    assert not trace_href("javascript:alert(1)", None).startswith("javascript:")
    view = build_view(make_full_results())
    assert [t.href for t in view.traces] == ["traces/baseline.pt.trace.json.gz", "traces/recommended.pt.trace.json.gz"]


def test_trace_facts_of_an_older_untyped_file_are_read_defensively():
    """Older perfscope wrote a free-form dict; malformed parts of it drop out, the rest loads and renders."""
    data = make_results([make_trial()]).to_dict()
    data["schema_version"] = 3  # untyped facts are read from schema 3 and older: a current file is never walked
    data["trials"][0]["metrics"]["trace_facts"] = {
        "kernel_time_by_category": {"gemm": "fast", "x": None, "ok": 1}, "top_kernels": [1, {"name": "k"}, {"name": "k2", "time_s": 0.1, "count": True}],
        "idle_fraction": "lots", "gpu_idle_fraction": 0.3,
    }
    results = Results.from_dict(data)
    loaded = results.trials[0].metrics.trace_facts
    assert facts.kernel_time_by_category(loaded) == {"ok": 1.0}
    assert [(k.name, k.count) for k in facts.top_kernels(loaded)] == [("k2", 0.0)]
    assert facts.idle_fraction(loaded) == 0.3 and facts.top_kernels(None) == []
    render_html(results)  # must not raise
    bad = make_trace_facts()
    bad.kernels.top.append(KernelStat(name="nan", time_s=float("nan"), count=1, category="other"))
    bad.kernels.time_by_category["inf"] = float("inf")
    assert "nan" not in [k.name for k in facts.top_kernels(bad)] and "inf" not in facts.kernel_time_by_category(bad)


# ------------------------------------------------------------------------------------------- charts


def _all_charts(results: Results):
    return build_charts(results, baseline=baseline_name(results), recommended=recommended_name(results))[0]


def test_a_chart_is_one_function_and_one_registry_line(monkeypatch):
    """The recipe of docs/architecture.md: a function (results, roles) -> Chart | None, a line in CHARTS."""
    from perfscope.report.charts import CHARTS, Chart, registry

    def waterfall(results, roles):
        return Chart(id="waterfall", title="Waterfall", caption="", figure={"data": [{"type": "bar", "x": [1.0], "y": ["step"]}]})

    monkeypatch.setattr(registry, "CHARTS", [*CHARTS, waterfall])
    assert [c.id for c in _all_charts(make_full_results())][-1] == "waterfall"
    monkeypatch.setattr(registry, "CHARTS", [*CHARTS, lambda results, roles: None])  # no data: no chart, no error
    assert "waterfall" not in [c.id for c in _all_charts(make_full_results())]


def test_every_chart_is_a_valid_plotly_figure_with_axis_titles():
    charts = _all_charts(make_full_results())
    ids = [c.id for c in charts]
    assert ids == ["step-breakdown", "mfu", "throughput", "memory-breakdown", "mb-throughput", "mb-memory", "kernel-categories", "utilization"]
    for chart in charts:
        figure = go.Figure(chart.figure)  # raises on an invalid property
        titled = [a for a in (figure.layout.xaxis, figure.layout.yaxis) if a.title.text]
        assert titled, f"{chart.id} has no axis title"


def test_micro_batch_chart_marks_oom_and_capacity():
    memory = next(c for c in _all_charts(make_full_results()) if c.id == "mb-memory").figure
    oom = next(t for t in memory["data"] if t["name"] == "out of memory")
    assert oom["x"] == [64] and oom["y"] == [80.0]
    (line,) = memory["layout"]["shapes"]
    assert line["y0"] == line["y1"] == 80.0
    assert "device capacity" in memory["layout"]["annotations"][0]["text"]


def test_step_breakdown_adds_up_to_the_mean_step():
    results = make_full_results()
    chart = next(c for c in _all_charts(results) if c.id == "step-breakdown").figure
    base = results.trial("baseline").metrics
    total = sum(series["x"][0] for series in chart["data"])
    assert total == pytest.approx(base.mean_step_time_s * 1e3)  # the step throughput corresponds to
    assert {s["name"] for s in chart["data"]} == {"compute & other", "data wait", "device idle / sync (trace)"}


def test_utilization_timeline_is_capped():
    results = make_full_results()
    results.trial("baseline").metrics.utilization = make_utilization(seconds=3600, n=50_000)
    chart = next(c for c in _all_charts(results) if c.id == "utilization").figure
    assert sum(len(t["x"]) for t in chart["data"]) <= MAX_POINTS_PER_CHART
    assert chart["layout"]["xaxis"]["title"]["text"] == "" and "xaxis3" in chart["layout"]


def test_utilization_chart_skips_metrics_never_sampled():
    trial = make_trial()
    trial.metrics.utilization.samples = [UtilizationSample(t_s=i * 0.1, cpu_percent=50.0) for i in range(10)]
    (chart,) = [c for c in _all_charts(make_results([trial])) if c.id == "utilization"]
    assert [t["name"] for t in chart.figure["data"]] == ["host CPU"]
    go.Figure(chart.figure)


# -------------------------------------------------------------------------------------------- files


def test_html_is_self_contained_and_offline():
    html = render_html(make_full_results())
    assert html.count("<script") == 3  # plotly.js, the chart JSON, the bootstrap
    assert html.count("Plotly.newPlot") == 1
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html)  # nothing fetched
    assert "@import" not in html and "url(" not in html.split("<script>")[0]
    assert len(html.encode()) <= 1.5e6  # the basic plotly.js bundle (1.2 MB), not the full 4.6 MB one
    assert "plotly.js (basic - minified)" in html


def test_charts_use_only_the_basic_bundles_trace_types():
    from perfscope.report.html import PLOTLY_TRACE_TYPES

    charts = _all_charts(make_full_results())
    assert charts
    for chart in charts:
        assert {t.get("type", "scatter") for t in chart.figure["data"]} <= PLOTLY_TRACE_TYPES, chart.id


def test_html_stays_small_with_many_trials():
    trials = [make_trial(f"t{i}", seed=i, n=10) for i in range(200)]
    trials[0].metrics.utilization = make_utilization(n=100_000)  # only the baseline's timeline is charted here
    assert len(render_html(make_results(trials)).encode()) < 6 * 2**20


def test_no_charts_no_plotly(tmp_path):
    results = make_results([make_trial("baseline", status="error")])
    html = render_html(results)
    assert "<script" not in html and "did not complete" in html


def test_write_report_is_atomic_and_both_formats(tmp_path):
    results = make_full_results()
    html = write_report(results, tmp_path / "out" / "report.html", fmt="html")
    md = write_report(results, tmp_path / "out" / "report.md", fmt="md")
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert md.read_text().startswith("# perfscope report: tiny_transformer")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.html", "report.md"]  # no temp files left
    with pytest.raises(ValueError):
        write_report(results, tmp_path / "x.pdf", fmt="pdf")  # type: ignore[arg-type]


def test_markdown_has_headline_fixes_trials_failures():
    text = render_markdown(make_full_results())
    for heading in ("## Summary", "## Ranked fixes", "### Measured, did not help here", "## Knobs tried one at a time", "## Trials", "## Failed and skipped trials", "## Reproduce"):
        assert heading in text
    assert "```diff\n@@ train.py @@\n-    loss = model(batch)" in text
    assert "| MFU | 33.6 %" in text
    assert "(estimated)" in text and "(measured, 99 % CI [" in text
    table = [line for line in text.splitlines() if line.startswith("| `baseline`")]
    assert len(table) == 1 and table[0].count("|") == 10  # 9 columns, no stray pipes


def test_cli_report_writes_html_and_md(tmp_path, capsys):
    path = make_full_results().save(tmp_path / "results.json")
    assert main(["report", str(path)]) == 0
    assert 1_000_000 < (tmp_path / "report.html").stat().st_size <= 1_500_000
    assert main(["report", str(path), "--format", "md", "-o", str(tmp_path / "s.md")]) == 0
    assert "## Ranked fixes" in (tmp_path / "s.md").read_text()


# ----------------------------------------------------------------------------------- template lookup


def test_templates_fall_back_to_the_source_tree(monkeypatch):
    monkeypatch.setattr(html_page, "TEMPLATE_PACKAGE", "perfscope._no_such_templates")
    assert Path(str(html_page.template_root())) == REPO / "reports" / "templates"


def test_wheel_ships_templates_and_renders_without_the_checkout(tmp_path):
    """A non-editable install: build the wheel from a copy, unpack it elsewhere, render from there."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "perfscope", src / "perfscope", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "reports", src / "reports", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    if build.returncode:
        pytest.skip(f"cannot build a wheel here: {build.stderr[-500:]}")
    (wheel,) = (tmp_path / "dist").glob("perfscope-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "site")
    shipped = {Path(n).name for n in names if n.startswith("perfscope/_templates/")}
    assert {p.name for p in (REPO / "reports" / "templates").glob("*.j2")} <= shipped
    assert "perfscope/report/vendor/plotly-basic.min.js" in names  # the report stays ≤ 1.5 MB when installed
    script = (
        "import sys; from perfscope.report import html, render_html; from tests.factories import make_results;"
        "root = str(html.template_root()); assert root.startswith(sys.argv[1]), root;"
        "assert 'perfscope report' in render_html(make_results())"
    )
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{REPO}", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "site")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr


def test_trace_diff_between_baseline_and_recommended_is_rendered():
    from perfscope.report.markdown import render_markdown
    from perfscope.report.view import build_view
    from tests.factories import make_full_results

    results = make_full_results()
    view = build_view(results)
    assert view.trace_diff.rows and view.trace_diff.rows[0][0].text == "gemm"
    _, baseline, recommended, change = (c.text for c in view.trace_diff.rows[0])
    assert baseline.endswith(" ms") and change.startswith(("+", "-"))
    text = render_markdown(results)
    assert "Where the time went" in text and f"| gemm | {baseline} | {recommended} | {change} |" in text
    results.trial(results.sweep.recommended_trial).metrics.trace_facts = None
    assert build_view(results).trace_diff.rows == []


def test_headline_says_why_only_the_baseline_is_shown():
    from perfscope.report.view import build_view
    from perfscope.results import Sweep
    from tests.factories import make_results

    results = make_results()
    assert "no sweep" in build_view(results).headline.lead
    results.sweep = Sweep(baseline_trial="baseline", recommended_trial="baseline")
    assert build_view(results).headline.recommendation.startswith("Keep your configuration: nothing that keeps your training recipe")


def test_an_upper_bound_estimate_is_worded_as_a_bound():
    """"up to 5.3× faster" for an estimate its rule calls an upper bound (Finding.upper_bound); "≈" only for a point
    estimate; a file written before the field says so by its estimate_method's words."""
    results = make_full_results()
    estimated = next(f for f in results.findings if f.estimated_gain is not None and f.gain is None)
    (point,) = [f for f in build_view(results).findings if f.rule_id == estimated.rule_id]
    estimated.upper_bound = True
    (shown,) = [f for f in build_view(results).findings if f.rule_id == estimated.rule_id]
    assert point.gain_text.startswith("≈") and shown.gain_text.startswith("up to ") and "≈" not in shown.gain_text
    old = results.to_dict()
    old["schema_version"] = 3  # written before the field: schema 3 or older
    for f in old["findings"]:
        del f["upper_bound"]
        f["estimate_method"] = "upper bound: every exposed collective hidden" if f["rule_id"] == estimated.rule_id else None
    assert [f.upper_bound for f in Results.from_dict(old).findings] == [f is estimated for f in results.findings]

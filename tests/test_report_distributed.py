"""The report's Distributed section: every rank (stragglers highlighted), communication vs compute, sharding memory."""

from __future__ import annotations

import json
import re

import plotly.graph_objects as go

from perfscope.report import render_html, render_markdown
from perfscope.report.html import PLOTLY_TRACE_TYPES, charts_json
from perfscope.report.view import build_view
from perfscope.rules import run_rules
from tests.distributed_factories import make_distributed_results
from tests.factories import make_results


def _run(**kw):
    results = make_distributed_results(exposed_share=0.3, straggler=2, **kw)
    results.findings = run_rules(results)
    return results


def _section(html: str) -> str:
    start = html.index('<section id="distributed">')
    return html[start:html.index("</section>", start)]


def test_view_has_every_rank_the_communication_and_the_sharding_table():
    d = build_view(_run()).distributed
    assert d is not None and d.trial == "baseline"
    ranks = [dict(zip(d.ranks.header, row, strict=True)) for row in d.ranks.rows]
    assert [r["Rank"].text for r in ranks] == ["0", "1", "2", "3"] and d.ranks.marks == ["", "", "straggler", ""]
    straggler = ranks[2]
    assert straggler["Own compute step"].text == "82.3 ms" and straggler["Rank"].tags == ["straggler", "slowest"]
    assert "30 % slower (garbage collection)" in straggler["Rank"].note
    assert [ranks[0][h].text for h in ("Collectives / step", "Exposed / step")] == ["45.0 ms", "30.0 ms"]
    assert d.ranks.header[6].startswith("Peak memory") and ranks[0][d.ranks.header[6]].text == "10.0 GiB"
    comm = {f.label: f.value for f in d.communication}
    assert comm["Compute"] == "70.0 ms (70 % of the step)" and comm["Exposed collectives"] == "30.0 ms (30 % of the step)"
    assert comm["Overlap"].startswith("33 %")
    (all_reduce, broadcast) = d.collectives.rows
    assert [c.text for c in all_reduce[4:]] == ["12.0 GB/s", "40.0 GB/s at 25.0 MiB", "30 %"] and broadcast[4].text == "—"
    assert [(r[0].text.split()[0], r[4].text, r[0].tags) for r in d.sharding.rows] == [
        ("DDP", "4.0 GiB", ["this run"]), ("ZeRO-1", "2.5 GiB", []), ("ZeRO-2", "1.8 GiB", []), ("ZeRO-3", "1.0 GiB", [])]
    assert d.sharding.rows[0][5].text == "4.0 GiB (baseline)" and d.sharding.rows[1][5].text == "—"
    assert {f.label: f.value for f in d.launch}["Ranks"] == "4 (1 node(s) × 4 per node)"


def test_rank_chart_draws_step_and_own_compute_per_rank_with_the_straggler_in_red():
    chart = build_view(_run()).distributed.chart
    go.Figure(chart.figure)  # raises on an invalid property
    assert {t["type"] for t in chart.figure["data"]} <= PLOTLY_TRACE_TYPES
    step, compute = chart.figure["data"]
    assert step["x"][2] == "rank 2 · node-0" and step["marker"]["color"][2] != step["marker"]["color"][0]
    assert round(compute["y"][2], 1) == 82.3


def test_html_shows_the_section_with_the_numbers_and_highlights_the_straggler():
    results = _run()
    html = render_html(results)
    section = _section(html)
    assert '<a href="#distributed">Distributed</a>' in html
    assert section.count('<tr class="straggler">') == 1 and "straggler</span>" in section
    for text in ("82.3 ms", "12.0 GB/s", "40.0 GB/s at 25.0 MiB", "ZeRO-3 (FSDP2)", "30.0 ms (30 % of the step)", 'id="chart-rank-steps"'):
        assert text in section, text
    assert any(c["id"] == "rank-steps" for c in json.loads(charts_json(build_view(results))))
    # the first screen is untouched: the section comes after the answer and the ranked fixes
    assert html.index('id="summary"') < html.index('id="fixes"') < html.index('id="distributed"')


def test_markdown_has_a_compact_section():
    md = render_markdown(_run())
    section = md[md.index("## Distributed"):md.index("## Trials")]
    assert "| 2 **straggler** **slowest** (straggler: 30 % slower (garbage collection)" in section and "| `node-0` |" in section
    assert "exposed collectives 30.0 ms (30 % of the step)" in section
    assert "| `all_reduce` | 12 | 40.5 ms | 400.0 MiB | 12.0 GB/s | 40.0 GB/s at 25.0 MiB | 30 % |" in section
    assert "| DDP **this run** |" in section


def test_single_process_run_has_no_distributed_section():
    results = make_results()
    assert build_view(results).distributed is None
    html = render_html(results)
    assert 'id="distributed"' not in html and "#distributed" not in html
    assert "## Distributed" not in render_markdown(results)


def test_the_headline_of_a_distributed_run_is_the_single_process_headline():
    labels = [r.label for r in build_view(_run()).headline.rows]
    assert labels == [r.label for r in build_view(make_results()).headline.rows]


def test_node_names_stay_text():
    results = _run()
    for r in results.trials[0].metrics.distributed.ranks:
        r.node = "<script>alert(1)</script>|x"
    html = render_html(results)
    assert "<script>alert(1)" not in html
    chart = build_view(results).distributed.chart
    assert all("<script>" not in x for x in chart.figure["data"][0]["x"])
    section = render_markdown(results).split("## Distributed")[1].split("## Trials")[0]
    # in a code span (text, not HTML), its pipe escaped so the table keeps its columns
    assert section.count("`<script>alert(1)</script>\\|x`") == 4 and "<script>" not in re.sub(r"`[^`]*`", "", section)

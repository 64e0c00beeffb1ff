"""Adding a rule or a chart = one file + one registry line + its test (docs/architecture.md, "Where each change goes").

A throwaway rule and a throwaway chart are defined here, as a newcomer's new module would define them, and registered
through the public registries alone (`perfscope.rules.registered`, `perfscope.report.charts.registered`): no edit of
the engine, the ranking, the report, the docs' generation or the MFU waterfall. The rule fires on recorded results,
is ranked among the built-in findings, rendered in both reports, listed by `perfscope rules` and in the generated
docs/rules.md catalogue; the chart is drawn in report.html. Each registration is undone when its block ends.
(The knob's part of the recipe, measured in real trials: tests/test_knob_in_one_file.py.)
"""

from __future__ import annotations

import json
import re

import pytest

from perfscope import rules
from perfscope.cli import main
from perfscope.pipeline import finish
from perfscope.ranking import rank_results
from perfscope.report import charts
from perfscope.report.charts import Chart, Roles
from perfscope.report.charts.base import layout_spec
from perfscope.report.waterfall_chart import part_fixes
from perfscope.results import Finding, Results
from perfscope.rules import Rule, RuleContext, RuleDoc
from perfscope.rules.docs import catalogue
from tests.factories import make_full_results

# ------------------------------------------------------------------------------ the rule's one file


class SlowHostStep(Rule):
    """The host spends a fixed share of each step in the user's Python (a throwaway rule for this test).

    Anti-pattern: per-step Python bookkeeping on the critical path. Best practice: move it off the step.
    """

    id = "PS990"
    name = "throwaway-host-step"
    doc = RuleDoc(detects="a slow baseline step (throwaway)", threshold="median step ≥ `slow_s`",
                  evidence="the baseline's median step", fix="move the bookkeeping off the step",
                  gain="estimated: the step without `share` of it", guard="a step under `slow_s`: no finding")
    groups = ("host",)
    addresses = ("host",)
    slow_s = 0.1
    share = 0.2

    def check(self, ctx: RuleContext) -> list[Finding]:
        step = ctx.metrics.typical_step
        if step is None or step.median < self.slow_s:
            return []
        return [Finding(rule_id=self.id, title="Throwaway: the host's bookkeeping slows the step", severity="medium",
                        evidence=[f"median step {step.median * 1e3:.1f} ms"], fix="-    log_everything(step)",
                        estimated_gain=1 / (1 - self.share), estimate_method="the step without the bookkeeping",
                        cause_share=self.share)]


def test_a_rule_registered_in_one_line_fires_is_ranked_rendered_and_documented(tmp_path, capsys):
    results = make_full_results()
    with rules.registered(SlowHostStep()):
        finish(results, tmp_path)
        ranked = [f.finding.rule_id for f in rank_results(results).fixes if f.finding]
        assert "PS990" in part_fixes("launch")  # the MFU waterfall links it from its `addresses` (host → launch)
        assert main(["rules"]) == 0 and "PS990  throwaway-host-step" in capsys.readouterr().out
        assert main(["rules", "ps990"]) == 0 and "Anti-pattern: per-step Python" in capsys.readouterr().out
        assert "| PS990 throwaway-host-step | a slow baseline step (throwaway) |" in catalogue(rules.all_rules())

    assert ranked == ["PS101", "PS990", "PS302", "PS501"]  # after the measured win, before the unquantified diagnoses
    found = next(f for f in results.findings if f.rule_id == "PS990")
    assert found.addresses == ["host"] and found.estimated_gain == pytest.approx(1.25)  # the engine adds `addresses`
    saved = Results.load(tmp_path / "results.json")
    assert [f.rule_id for f in saved.findings if f.rule_id == "PS990"] == ["PS990"]
    assert re.search(r"^### 2\. Throwaway: the host's bookkeeping slows the step", (tmp_path / "report.md").read_text(), re.MULTILINE)
    assert "Throwaway: the host&#39;s bookkeeping slows the step" in (tmp_path / "report.html").read_text()
    gap_row = next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| launch & host"))
    assert "PS990" in gap_row  # the waterfall's "Acts on it" column, rendered

    assert "PS990" not in [r.id for r in rules.all_rules()] and "PS990" not in part_fixes("launch")  # undone


def test_a_rule_stays_silent_without_its_problem_and_registering_it_is_checked():
    results = make_full_results()
    with rules.registered(_strict()):
        assert "PS990" not in [f.rule_id for f in rules.run_rules(results)]
        with pytest.raises(ValueError, match="already registered"):
            rules.register(_strict())

    class Undocumented(SlowHostStep):
        id = "PS991"
        doc = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="RuleDoc"):
        rules.register(Undocumented())
    assert "PS991" not in [r.id for r in rules.all_rules()]


def _strict() -> SlowHostStep:
    rule = SlowHostStep()
    rule.slow_s = 1.0  # the fixture's 120 ms step is not slow under this threshold
    return rule


# ------------------------------------------------------------------------------ the chart's one file


def data_wait_chart(results: Results, roles: Roles) -> Chart | None:
    """A throwaway chart: each run's share of the step spent waiting for data."""
    runs = [t for t in results.ok_trials() if t.metrics and t.metrics.data_wait_share is not None]
    if not runs:
        return None
    figure = {"data": [{"type": "bar", "x": [roles.names[t.name] for t in runs],
                        "y": [t.metrics.data_wait_share for t in runs]}],  # type: ignore[union-attr]
              "layout": layout_spec("Run", "Data wait (share of the step)")}
    return Chart(id="data-wait", title="Data wait per run", caption="The share of each step spent on the loader.",
                 figure=figure)


def _drawn(html: str) -> dict[str, dict]:
    """The page's chart specs by id, as Plotly.newPlot receives them."""
    blob = re.search(r'<script type="application/json" id="perfscope-charts">(.*?)</script>', html, re.DOTALL)
    assert blob, "the page carries no chart data"
    return {c["id"]: c["figure"] for c in json.loads(blob.group(1))}


def test_a_chart_registered_in_one_line_is_drawn_in_the_html_report(tmp_path):
    results = make_full_results()
    with charts.registered(data_wait_chart):
        finish(results, tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert 'id="chart-data-wait"' in html and "Data wait per run" in html
    figure = _drawn(html)["data-wait"]
    assert figure["data"][0]["x"][0] == "baseline" and figure["data"][0]["y"][0] == pytest.approx(0.18, abs=0.02)

    finish(results, tmp_path)  # undone: the next report has no such chart
    assert "data-wait" not in _drawn((tmp_path / "report.html").read_text())


def test_a_chart_the_page_cannot_draw_is_a_line_saying_why_never_an_empty_box(tmp_path):
    def heatmap(results: Results, roles: Roles) -> Chart:
        return Chart(id="heat", title="Heat", caption="", figure={"data": [{"type": "heatmap", "x": [1], "y": [1]}]})

    def nothing(results: Results, roles: Roles) -> Chart:
        return Chart(id="none", title="Nothing", caption="", figure={"data": [{"type": "bar", "x": [], "y": []}]})

    with charts.registered(heatmap), charts.registered(nothing):
        drawn, absent = charts.build_charts(make_full_results(), baseline="baseline", recommended=None)
        with pytest.raises(ValueError, match="already registered"):
            charts.register(heatmap)
    assert not {"heat", "none"} & {c.id for c in drawn}
    assert "Heat: not drawn, the page's plotly bundle has no heatmap trace." in absent
    assert "Nothing: not drawn, this run recorded no data for it." in absent
    assert heatmap not in charts.CHARTS and nothing not in charts.CHARTS

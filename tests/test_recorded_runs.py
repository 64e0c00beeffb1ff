"""Advice on runs recorded on this 2-core CPU (tests/data/reports/, benchmarks/record_report_fixtures.py): the rules
of this perfscope, re-run on what the machine measured, never rank a fix the run measured as slower or as no
significant change, never write `cuda` into a CPU run's code, and the headline names what the ranking starts with.
On the data-bound run the data-loader finding ranks first and its estimate is within 25% of what the workers'
trials measured (the figure benchmarks/data_loader_estimate.py prints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfscope.report.view import build_view
from perfscope.results import Results
from perfscope.rules import partition_findings, run_rules

FIXTURES = Path(__file__).parent / "data" / "reports"
RECORDED = sorted(FIXTURES.glob("*.json"))


def _load(path: Path) -> Results:
    results = Results.load(path)
    results.findings = run_rules(results)
    return results


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_measured_beats_believed_on_a_recorded_run(path):
    results = _load(path)
    ranked, did_not_help = partition_findings(results.findings)
    for f in ranked:
        assert f.gain is None or (f.gain.faster and f.gain.ratio > 1), (f.rule_id, f.title, f.gain)
        assert "cuda" not in f.fix.lower(), (f.rule_id, f.fix)
        if f.estimated_gain is not None:
            assert f.estimate_method and f.estimate_bound
    for o in results.sweep.knobs:  # every measured knob that is no win is listed apart, never ranked
        if o.status == "measured" and o.gain is not None and not o.gain.faster and o.trial != results.sweep.baseline_trial:
            assert any(f.trial == o.trial for f in did_not_help), o.knob
    view = build_view(results)
    if view.story and view.story.recommended:
        assert view.findings[0].recommended and view.findings[0].gain_text in view.headline.gain
    else:
        assert view.headline.recommendation.startswith("Keep your configuration") and not any(f.recommended for f in view.findings)


def test_data_bound_run_ranks_the_data_loader_first_and_its_estimate_holds():
    from benchmarks.data_loader_estimate import TOLERANCE, estimate_vs_measured

    results = _load(FIXTURES / "data_bound_cpu.json")
    ranked, _ = partition_findings(results.findings)
    assert ranked[0].rule_id == "PS201"
    rows = estimate_vs_measured(results)
    assert rows, "the recorded run measured no worker count"
    for r in rows:
        assert abs(r.error) <= TOLERANCE, (r.workers, r.estimated, r.measured.ratio)
    view = build_view(results)
    data_fix = next(f for f in view.findings if f.rule_id == "PS201")
    assert data_fix.dataset_cost, "the report shows where __getitem__ spends its time"

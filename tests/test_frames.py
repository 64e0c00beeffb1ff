"""The pandas views agree with the typed model they copy, on a real recorded `analyze` run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfscope.results import Results, frames
from perfscope.results.waterfall import mfu_waterfall
from tests.distributed_factories import make_distributed_results

RECORDED = Path(__file__).parent / "data" / "reports"


@pytest.fixture(scope="module")
def quick_start() -> Results:
    return Results.load(RECORDED / "quick_start_cpu.json")


def test_one_row_per_run_with_the_runs_own_throughput(quick_start: Results) -> None:
    df = frames.trials(quick_start)
    assert list(df.index) == [t.name for t in quick_start.trials]
    for t in quick_start.ok_trials():
        row = df.loc[t.name]
        assert row["samples_per_s"] == t.metrics.samples_per_s
        assert row["step_time_s"] == pytest.approx(t.metrics.wall_s / t.metrics.steps)
        assert row["configuration"] == t.configuration
    # Grouping by configuration is what a notebook does first: every configuration is there.
    assert set(df["configuration"]) == {t.configuration for t in quick_start.trials}


def test_knobs_carry_the_sweeps_gains_and_the_recommendation(quick_start: Results) -> None:
    df = frames.knobs(quick_start)
    sweep = quick_start.sweep
    assert sweep is not None
    assert list(df.index) == [k.knob for k in sweep.knobs]
    for k in sweep.knobs:
        if k.gain is not None:
            assert df.loc[k.knob, "ratio"] == k.gain.ratio
            assert df.loc[k.knob, "verdict"] == k.gain.verdict
        assert bool(df.loc[k.knob, "recommended"]) == (k.knob in sweep.recommended_knobs)


def test_waterfall_rows_add_up_to_the_gap(quick_start: Results) -> None:
    wf = mfu_waterfall(quick_start)
    assert wf is not None
    df = frames.waterfall(quick_start)
    assert list(df.index) == [p.key for p in wf.parts]
    assert df["points"].sum(skipna=True) + wf.end_points == pytest.approx(100.0, abs=1e-6)


def test_findings_and_kernels_come_from_the_run(quick_start: Results) -> None:
    df = frames.findings(quick_start)
    assert list(df["rule"]) == [f.rule_id for f in quick_start.findings or []]
    kernels = frames.kernels(quick_start)
    traced = [t for t in quick_start.trials if t.metrics and t.metrics.trace_facts]
    assert len(kernels) == sum(len(t.metrics.trace_facts.kernels.top) for t in traced)
    assert set(kernels["source"]) <= {"cpu ops", "kernels"}


def test_ranks_one_row_per_rank_and_empty_frames_for_one_process(quick_start: Results) -> None:
    assert frames.ranks(quick_start).empty  # one process: no ranks, an empty frame rather than an error
    results = make_distributed_results(world=4)
    df = frames.ranks(results)
    assert sorted(df["rank"]) == [0, 1, 2, 3]
    ranks = results.trials[0].metrics.distributed.ranks
    assert list(df["samples_per_s"]) == [r.samples_per_s for r in ranks]


def test_a_results_file_without_a_sweep_gives_empty_views() -> None:
    from tests.factories import make_results

    results = make_results()
    results.sweep = None
    results.findings = None
    assert frames.knobs(results).empty and frames.findings(results).empty
    assert not any(math.isnan(x) for x in frames.trials(results)["samples_per_s"].dropna())

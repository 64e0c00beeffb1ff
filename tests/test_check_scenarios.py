"""Issue 35's table, row by row, through run_gate (the CLI's path) on jobs built from one real run (tests/data).

Each row draws its history and current job from benchmarks/gate_simulation.py's scenarios: copies of the quick
start's real baseline run with their throughput scaled (2% run noise, 5 runs per stored session, 3 current
runs, --max-drop 5%). The seeded counts are small; benchmarks/results/gate_simulation.txt holds 1,000 per row.
"""

from __future__ import annotations

import math
import random

import pytest

from benchmarks.gate_simulation import SCENARIOS, job, real_run, simulate
from benchmarks.stat_simulation import wilson
from perfscope.check import GateOptions, run_gate
from perfscope.check.baseline import BaselineHistory
from perfscope.check.sessions import DEFAULT_BETWEEN_SESSION, MIN_SPREAD_DF
from perfscope.cli import main
from perfscope.results import msg
from perfscope.wording import words

ROW = {s.name: s for s in SCENARIOS}


def _draw(name: str, seed: int = 0):
    scenario = ROW[name]
    history, current = scenario.draw(real_run(), random.Random(seed))
    return run_gate(current, BaselineHistory(sessions=history), scenario.options), history, current


def test_the_synthetic_runs_are_the_real_runs_scaled():
    results, trial = real_run()
    made = job((results, trial), random.Random(1), runs=3, level=0.0, host="x", run_sd=0.0)
    assert [t.metrics.samples_per_s for t in made.trials] == pytest.approx([trial.metrics.samples_per_s] * 3)
    assert made.trials[0].metrics.steps == trial.metrics.steps and made.environment.cpu_model == results.environment.cpu_model


def test_a_runner_with_twice_the_cores_is_not_comparable_exit_4(tmp_path, capsys):
    counts = simulate(ROW["identical code, runner 6% faster with twice the cores"], 20)
    assert counts == {"not_comparable": 20}
    _, history, current = _draw("identical code, runner 6% faster with twice the cores")
    base = BaselineHistory(sessions=history).save(tmp_path / "base.json")
    cur = current.save(tmp_path / "cur.json")
    assert main(["check", str(cur), "--baseline", str(base), "--metric", "samples_per_s"]) == 4
    err = capsys.readouterr().err
    assert "not comparable: usable CPU cores (affinity, cgroup quota) 2.0 → 4.0" in err and "perfscope ab" in err


def test_a_real_regression_hidden_by_a_faster_runner_never_passes():
    counts = simulate(ROW["real 10% regression on a runner 10% faster, 10 sessions"], 100)
    assert counts["pass"] == 0 and counts["regression"] == 0, counts  # the gate cannot judge across hosts: it says so
    report, _, _ = _draw("real 10% regression on a runner 10% faster, 10 sessions")
    assert report.verdicts[0].message.params["decides"] == msg("decide_new_host", hosts=MIN_SPREAD_DF + 1)


def test_identical_code_on_a_slower_host_is_no_false_alarm():
    counts = simulate(ROW["identical code on a 7% slower host, 10 sessions of one other host"], 200)
    assert wilson(counts["regression"], 200)[1] <= 0.05, counts


def test_a_one_session_baseline_says_what_would_decide_and_fails_a_29_percent_drop(tmp_path, capsys):
    same = simulate(ROW["one-session baseline, identical code"], 200)
    assert wilson(same["regression"], 200)[1] <= 0.05 and same["pass"] <= 10, same
    report, _, _ = _draw("one-session baseline, identical code")
    said = report.verdicts[0].message.params
    (basis,) = said["runs"].params["basis"]
    assert basis.code == "session_spread_assumed" and basis.params["sd"] == pytest.approx(math.log1p(DEFAULT_BETWEEN_SESSION))
    assert said["decides"] == msg("decide_assumed_spread", sessions=1, needed=MIN_SPREAD_DF + 1)
    drop = simulate(ROW["one-session baseline, 29% drop"], 100)
    assert drop["regression"] >= 98, drop
    from tests.factories import make_results, make_runs

    saved = tmp_path / "b.json"
    assert main(["baseline", "save", str(make_results(make_runs(runs=5)).save(tmp_path / "r.json")), "--to", str(saved)]) == 0
    few = msg("few_sessions", sessions=1, assumed=DEFAULT_BETWEEN_SESSION, needed=MIN_SPREAD_DF + 1)
    assert words(few) in capsys.readouterr().err


def test_a_real_5_percent_regression_against_3_sessions_does_not_pass():
    counts = simulate(ROW["real 5% regression, 3 stored sessions"], 200)
    assert wilson(counts["pass"], 200)[1] <= 0.05, counts
    report, _, _ = _draw("real 5% regression, 3 stored sessions")
    assert report.outcome == "inconclusive"
    assert report.verdicts[0].message.params["decides"] == msg("decide_assumed_spread", sessions=3, needed=MIN_SPREAD_DF + 1)


@pytest.mark.parametrize("sessions", [3, 10])
def test_a_4_percent_day_to_day_offset_keeps_false_alarms_at_the_stated_rate(sessions):
    counts = simulate(ROW[f"day-to-day offset 4%, {sessions} stored sessions, identical code"], 200)
    assert wilson(counts["regression"], 200)[1] <= 0.05, counts


def test_a_quiet_history_of_ten_sessions_passes_identical_code_mostly():
    counts = simulate(ROW["day-to-day offset 1%, 10 stored sessions, identical code"], 100)
    assert counts["pass"] >= 50 and counts["regression"] <= 5, counts


def test_a_stated_between_session_spread_is_used_as_known():
    report, history, current = _draw("one-session baseline, identical code")
    stated = run_gate(current, BaselineHistory(sessions=history),
                      GateOptions(metrics=("samples_per_s",), between_session=0.01))
    assert stated.verdicts[0].message.params["runs"].params["basis"] == [msg("spread_stated", unit="session", value=0.01)]
    assert stated.verdicts[0].high - stated.verdicts[0].low < report.verdicts[0].high - report.verdicts[0].low

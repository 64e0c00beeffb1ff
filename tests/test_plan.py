"""The time an analysis announces before its first run (perfscope.search.plan), and the budget that keeps it: the
plan's counts follow the sweep's rules, decided on counts and given step times, never on this machine's clock."""

from __future__ import annotations

import pytest

from perfscope.results.config import TrialConfig
from perfscope.search.plan import LANE_AA_RUNS, RUNS_PER_VERDICT, Plan, minutes, plan_sweep, run_estimate
from perfscope.search.sweep import SweepOptions
from tests.test_sweep import _ctx


def test_the_plan_lists_what_the_first_pass_measures_by_the_sweeps_rules():
    cpu = plan_sweep(_ctx(device="cpu"), SweepOptions())
    assert cpu.configurations[:2] == ["amp_bf16", "compile"] and "amp_fp16" not in cpu.configurations  # inapplicable on a CPU
    assert cpu.configurations[-2:] == ["micro-batch ×2", "micro-batch ×4"]  # the CPU search stops at 4×
    only = plan_sweep(_ctx(device="cpu"), SweepOptions(only=["amp_bf16", "compile"]))
    assert only.configurations == ["amp_bf16", "compile"]
    # the baseline; each to a verdict (3 runs, each beside a baseline run); a join; the confirmation
    assert only.runs == 1 + 2 * RUNS_PER_VERDICT * 2 + 4 + 6
    gpu = plan_sweep(_ctx(device="cuda"), SweepOptions(skip=["micro_batch", "grad_accum"]))
    assert "activation_checkpointing" not in gpu.configurations  # on a GPU only paired with the micro-batch search
    assert plan_sweep(_ctx(device="cpu"), None, baseline_runs=3).runs == 3  # --no-sweep --repeat 3


def test_the_announcement_says_the_time_and_whether_the_budget_ends_it_first():
    plan = Plan(configurations=["amp_bf16", "compile"], budget_s=300)
    within = plan.words(5.0, "from the probe")
    assert within[0].startswith("plan: 2 configurations beside the baseline (amp_bf16, compile)")
    assert f"about {1 + 2 * RUNS_PER_VERDICT * 2 + 4 + 6} run(s) of ~5.0 s" in within[0]
    assert within[1] == "expected time: about 2 min 15 s, within its budget of 5 min (--budget S, --no-budget)"
    cut = plan.words(20.0, "from the probe")[1]
    assert cut.startswith("expected time: 5 min, its budget") and "unbounded about 9 min" in cut and "what it decided" in cut
    assert plan.expected_s(20.0) == 300 and plan.expected_s(5.0) == 135
    assert "no budget" in Plan(configurations=["x"], budget_s=None).words(1.0, "probe")[1]
    assert [minutes(s) for s in (45, 89.6, 90, 300, 461)] == ["45 s", "90 s", "1 min 30 s", "5 min", "7 min 41 s"]


def test_with_lanes_the_knobs_runs_are_shared_and_the_rest_goes_run_by_run():
    """4 knob variants and 2 micro-batch points on 4 lanes: the variants' 4 × 8 runs take 8 run times; the baseline,
    the micro-batch points' 2 × 8, the join and the confirmation go run by run; the A/A check adds 2."""
    configurations = ["a", "b", "c", "d", "micro-batch ×2", "micro-batch ×4"]
    one, four = Plan(configurations=configurations, budget_s=None), Plan(configurations=configurations, budget_s=None, lanes=4)
    assert one.run_times == one.runs == 1 + 2 * RUNS_PER_VERDICT * 6 + 4 + 6
    in_turn = 1 + 2 * RUNS_PER_VERDICT * 2 + 4 + 6
    assert four.runs == one.runs and four.run_times == in_turn + LANE_AA_RUNS + 2 * RUNS_PER_VERDICT * 4 // 4
    assert four.expected_s(10.0) == 10.0 * four.run_times
    assert f"on 4 lanes at once (about {four.run_times} run times" in four.words(10.0, "probe")[0]
    assert "lanes" not in one.words(10.0, "probe")[0]
    assert plan_sweep(_ctx(device="cpu"), SweepOptions(), lanes=2).lanes == 2


@pytest.mark.parametrize(("step_s", "expected"), [(0.28, 2.0 + (5 + 10) * 0.28), (0.02, 2.0 + (5 + 25) * 0.02), (None, 2.0)])
def test_a_runs_estimate_is_the_probe_process_plus_warm_up_and_the_calibrated_window(step_s, expected):
    config = TrialConfig(device="cpu", micro_batch_size=8)  # warm-up 5, window ≥ 0.5 s and ≥ 10 steps
    assert run_estimate(2.0, step_s, config) == pytest.approx(expected)
    assert run_estimate(2.0, 0.1, config.replace(steps=3)) == pytest.approx(2.0 + (5 + 3) * 0.1)  # --steps fixes the window


@pytest.mark.slow
def test_analyze_announces_its_time_before_the_first_run_and_the_budget_ends_the_sweep(tmp_path):
    """A budget no run fits in (1 ms): the time is announced before the baseline, the sweep measures no candidate,
    and the recommendation names what it did not measure — whatever the machine's speed."""
    import subprocess
    import sys
    from pathlib import Path

    from perfscope.results import Results

    example = Path(__file__).parent.parent / "examples" / "tiny_transformer.py"
    proc = subprocess.run([sys.executable, "-m", "perfscope", "analyze", str(example), "--device", "cpu", "--out", str(tmp_path),
                           "--steps", "3", "--warmup", "1", "--no-trace", "--budget", "0.001", "--only", "amp_bf16,gc_freeze"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert err.index("perfscope: expected time: 0 s, its budget") < err.index("[1 | ") < err.index("baseline: running")
    results = Results.load(tmp_path / "results.json")
    assert [t.configuration for t in results.trials] == ["baseline"]  # no retry, no candidate: the budget ended it
    sweep = results.sweep
    assert sweep is not None and sweep.stopped_early is not None and sweep.stopped_early.code == "budget_of_exhausted"
    assert sweep.recommended_trial == "baseline" and any(u.startswith("measuring") for u in sweep.unfinished)
    assert "not finished: measuring" in proc.stdout

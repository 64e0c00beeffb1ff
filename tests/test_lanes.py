"""Parallel sweeps' pieces without real trials: the lane plan, the pinning, the A/A check, within-lane comparisons,
the lane choice, a lost lane, and the family-wise bound on 8 lanes of unequal speed (benchmarks.lanes_model)."""

from __future__ import annotations

import math
import os
import random
import subprocess
from pathlib import Path

import pytest

from benchmarks.lanes_model import LaneModel, SimLane, SimLaneSession, simulate_lane_sweep
from benchmarks.stat_simulation import wilson
from benchmarks.sweep_model import NOISE_MODELS, NoiseModel, _context
from perfscope.cli import main
from perfscope.errors import EXIT_USER, UserError
from perfscope.lanes.executors import LaneFailure, LocalRunner
from perfscope.lanes.plan import Lane, plan_lanes
from perfscope.lanes.sweep import LaneOptions, LaneSweeper, check_lanes
from perfscope.measure.contention import sweep_env
from perfscope.report.html import render_view_html
from perfscope.report.markdown import render_view_markdown
from perfscope.report.view import build_view
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.results.verdicts import LaneRecord, ParallelSweep, Sweep
from perfscope.search.candidate import BASELINE, SweepOptions
from perfscope.search.compare import ReferenceSeries, paired_test
from perfscope.trial.pin import LANE_CPUS_ENV, born_on, lane_threads, parse_cpus
from perfscope.trial.runner import needs_fresh_interpreter
from tests.factories import make_results

QUIET = NoiseModel("quiet", sigma=1e-9)


def test_lanes_split_the_cores_disjointly_and_follow_numa_nodes():
    lanes = plan_lanes(2, cpus=frozenset({0, 1}), nodes=[])
    assert [sorted(lane.cpus) for lane in lanes] == [[0], [1]]
    assert lanes[0].env() == {LANE_CPUS_ENV: "0", **sweep_env()} and lanes[1].device is None
    gpus = plan_lanes(devices=["0", "1"], cpus=frozenset(range(8)), nodes=[frozenset(range(4)), frozenset(range(4, 8))])
    assert [sorted(lane.cpus) for lane in gpus] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # one node each
    assert gpus[1].env() == {LANE_CPUS_ENV: "4,5,6,7", "CUDA_VISIBLE_DEVICES": "1", **sweep_env()}
    three = plan_lanes(3, cpus=frozenset(range(8)), nodes=[frozenset(range(4)), frozenset(range(4, 8))])
    assert sorted(c for lane in three for c in lane.cpus) == list(range(6))  # 3 cannot divide 2 nodes: one pool
    with pytest.raises(UserError, match="need at least 3 CPU cores"):
        plan_lanes(3, cpus=frozenset({0, 1}), nodes=[])
    with pytest.raises(UserError, match="disagree"):
        plan_lanes(3, devices=["0", "1"], cpus=frozenset({0, 1}))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_what_a_lane_starts_is_born_on_its_cores_and_still_forks_from_its_zygote(tmp_path):
    """The lane's zygote and fresh interpreters start inside born_on: the child runs on the lane's core from its
    first instruction (here `grep` reading its own mask), the starting thread gets its mask back, and the lane's
    environment keeps its trials forked from the lane's zygote (no variable that needs a fresh interpreter)."""
    mine = os.sched_getaffinity(0)
    core = max(mine)
    with born_on(frozenset({core})):
        child = subprocess.run(["grep", "Cpus_allowed_list", "/proc/self/status"], capture_output=True, text=True, check=True)
    assert child.stdout.split()[-1] == str(core)
    assert os.sched_getaffinity(0) == mine
    lane = plan_lanes(1, cpus=frozenset({core}), nodes=[])[0]
    assert not needs_fresh_interpreter(lane.env())
    assert LocalRunner(lane, tmp_path).cpus == frozenset({core})


def test_a_torchrun_trial_takes_its_lanes_devices_as_a_group():
    """--devices 0,1,2,3 with 2 ranks a trial: 2 lanes of 2 GPUs (in the order given) and half the cores each; the
    ranks share the lane's cores (threads divided among them); what cannot group is a usage error."""
    lanes = plan_lanes(devices=["0", "1", "2", "3"], cpus=frozenset(range(8)), nodes=[], ranks=2)
    assert [(lane.device, sorted(lane.cpus)) for lane in lanes] == [("0,1", [0, 1, 2, 3]), ("2,3", [4, 5, 6, 7])]
    assert lanes[1].env()["CUDA_VISIBLE_DEVICES"] == "2,3" and lanes[1].describe() == "lane 1: GPUs 2,3, cores 4,5,6,7"
    assert lane_threads(lanes[0].cpus, {"LOCAL_WORLD_SIZE": "2"}) == 2 and lane_threads(lanes[0].cpus, {}) == 4
    with pytest.raises(UserError, match="do not divide into groups of 2"):
        plan_lanes(devices=["0", "1", "2"], cpus=frozenset(range(8)), nodes=[], ranks=2)
    assert LaneOptions(devices=["0", "1", "2", "3"], ranks=2).count == 2
    with pytest.raises(UserError, match="local executor only"):
        LaneOptions(lanes=2, executor="ray", ranks=2)
    from perfscope.analyze import AnalyzeOptions
    from perfscope.trial.launch import Launch

    options = AnalyzeOptions(workload_path=Path("x.py"), launch=Launch(nproc_per_node=2), parallel=LaneOptions(lanes=2))
    assert options.parallel.ranks == 2
    with pytest.raises(UserError, match="multi-node"):
        AnalyzeOptions(workload_path=Path("x.py"), launch=Launch(nproc_per_node=2, nnodes=2, rdzv_endpoint="h:1"),
                       parallel=LaneOptions(lanes=2))


def test_cpu_lists_parse_as_taskset_writes_them():
    assert parse_cpus("0,2-3") == {0, 2, 3}
    with pytest.raises(ValueError, match=LANE_CPUS_ENV):
        parse_cpus("zero")


def test_lane_options_are_checked_before_anything_runs():
    with pytest.raises(UserError, match="unknown executor"):
        LaneOptions(lanes=2, executor="kubernetes")
    with pytest.raises(UserError, match="go with --executor slurm"):
        LaneOptions(lanes=2, slurm_partition="gpu")


def test_the_plans_time_estimate_counts_the_aa_checks_runs():
    from perfscope.lanes.sweep import AA_RUNS
    from perfscope.search.plan import LANE_AA_RUNS

    assert LANE_AA_RUNS == AA_RUNS
    assert LaneOptions(lanes=3).count == 3 and LaneOptions(devices=["0", "1"]).count == 2


def test_the_aa_check_drops_an_outlier_lane_and_states_the_spread():
    rates = {i: [math.log(100 * s)] * 2 for i, s in enumerate([1.0, 0.95, 0.9, 0.85, 0.62])}
    check = check_lanes(rates)
    assert set(check.outliers) == {4} and check.outliers[4].code == "lane_aa_outlier"
    assert check.outliers[4].params["level"] == pytest.approx(0.62 / 0.9)
    assert check.spread is not None and 0.03 < check.spread < 0.1
    two = check_lanes({0: [math.log(100)], 1: [math.log(60)]})  # no median to be an outlier from
    assert not two.outliers and two.spread is not None


def _two_lane_runs(speeds: tuple[float, float], effect: float, pairs: int):
    """Lanes measured one after another in a quiet simulation: lane speeds differ, the effect does not."""
    session = SimLaneSession(QUIET, LaneModel(speeds), {"k": effect}, random.Random(0))
    config = TrialConfig(device="cpu", micro_batch_size=8)
    lanes = [SimLane(0), SimLane(1)]
    for i in range(pairs):
        lane = lanes[i % 2]
        session.measure(BASELINE, config, [], lane=lane)
        session.measure("cand", config, ["k"], lane=lane)
        session.measure(BASELINE, config, [], lane=lane)
    return session.results


def test_a_candidate_run_is_compared_with_its_own_lanes_baseline_only():
    """Lane 1 is 40% slower: within lanes every ratio is the effect (1.10); pairing across lanes would not be."""
    results = _two_lane_runs((1.0, 0.6), 0.10, pairs=4)
    test = paired_test(results.runs("cand"), results.runs(BASELINE))
    assert test is not None and math.exp(test.mean) == pytest.approx(1.10, rel=1e-6)
    series = ReferenceSeries(results.runs(BASELINE))
    var, diffs = series.variance()
    assert var == pytest.approx(0.0, abs=1e-12) and diffs == 6  # successive differences within each lane: 3 + 3
    for run in results.runs("cand"):
        assert series.level(run) == pytest.approx(math.log(100 * (1.0, 0.6)[run.lane]))
    stripped = [r for r in results.runs("cand")]
    for r in results.trials:
        r.lane = None  # the same runs, lanes forgotten: the neighbours cross lanes and the ratios scatter
    crossed = paired_test(stripped, results.runs(BASELINE))
    assert crossed is not None and crossed.se > 0.1


def _sweeper(lanes: list, speeds: tuple[float, ...] = (1.0, 1.0)) -> LaneSweeper:
    session = SimLaneSession(QUIET, LaneModel(speeds), {}, random.Random(1))
    ctx = _context()
    session.measure(BASELINE, ctx.base, [])
    return LaneSweeper(session=session, ctx=ctx, lanes=lanes, parallel=False, options=SweepOptions(order_seed=0))


def test_a_candidates_runs_rotate_over_the_lanes():
    sweeper = _sweeper([SimLane(0), SimLane(1)])
    config = _context().base
    for _ in range(4):
        sweeper.measure("a", config, [])
    assert sorted(t.lane for t in sweeper.results.trials if t.configuration == "a") == [0, 0, 1, 1]


def test_a_lost_lane_is_dropped_with_its_reason_and_its_pair_runs_elsewhere(monkeypatch):
    """The executor loses lane 1 at its third run (the engine's reason, as a Slurm node failure says it)."""
    lanes = [SimLane(0), SimLane(1)]
    sweeper = _sweeper(lanes)
    measure = sweeper.session.measure
    calls = {"n": 0}

    def flaky(configuration, config, knobs=None, *, lane=None):
        if lane is lanes[1]:
            calls["n"] += 1
            if calls["n"] == 3:
                raise LaneFailure("slurm job 42 NODE_FAIL: node gpu7 stopped responding")
        return measure(configuration, config, knobs, lane=lane)

    monkeypatch.setattr(sweeper.session, "measure", flaky)
    config = _context().base
    trials = sweeper.measure_many([("a", config, []), ("b", config, [])] * 2)
    assert len(trials) == 4 and all(t.ok for t in trials)
    record = sweeper.records[1]
    assert record.dropped == "slurm job 42 NODE_FAIL: node gpu7 stopped responding"
    assert sweeper.active == [lanes[0]]
    assert any(t.lane == 1 for t in sweeper.results.trials)  # its finished runs count
    assert sweeper.measure_many([("c", config, [])])[0].lane == 0  # the sweep goes on on the lane left


def test_family_wise_error_holds_on_8_unequal_lanes_with_an_outlier():
    """8 lanes whose speeds differ by up to 20%, one more 1.5× slower than the median lane: the A/A check drops the
    outlier, and no-effect knobs are called faster or slower in at most 5% of 12-knob sweeps (80 seeded sweeps)."""
    lanes = LaneModel.spread(8, spread=0.20, outlier=1.5, seed=3)
    outs = [simulate_lane_sweep(NOISE_MODELS["cpu"], lanes, [0.0] * 12, seed=s, recommend=False) for s in range(80)]
    errors = sum(o.sweep.false_discoveries > 0 for o in outs)
    assert wilson(errors, len(outs))[1] <= 0.05, errors
    dropped_outlier = sum(o.dropped == (7,) for o in outs)
    assert dropped_outlier >= 75, [o.dropped for o in outs]
    assert not any(d != 7 for o in outs for d in o.dropped)  # a lane of the 20% spread: 1 in 200 (benchmark), not here


def test_a_real_effect_is_found_across_unequal_lanes():
    lanes = LaneModel.spread(8, spread=0.20, outlier=1.5, seed=3)
    outs = [simulate_lane_sweep(NOISE_MODELS["cpu"], lanes, [0.25] + [0.0] * 5, seed=s) for s in range(40)]
    found = sum(o.sweep.found for o in outs)
    assert found >= 36 and sum(o.sweep.recommended == ("k00",) for o in outs) >= 36


def test_a_lane_descriptor_names_its_device_and_cores():
    assert Lane(1, frozenset({2, 3}), "1").describe() == "lane 1: GPU 1, cores 2,3"


def test_the_report_has_a_lanes_table_with_the_time_saved():
    """Its own section in the HTML and the Markdown (not lines among the sweep's notes): each lane's device, cores,
    A/A level, runs, failures and why it was dropped, and the wall time beside the sequential estimate."""
    results = make_results()
    results.sweep = Sweep(baseline_trial="baseline", parallel=ParallelSweep(
        executor="slurm", aa_spread=0.031, wall_s=300.0, sequential_estimate_s=1100.0,
        notes=[msg("aa_check", runs=2, spread=0.031, dropped=0)],
        lanes=[LaneRecord(index=0, device="0", cpus=[0, 1], level=1.0, runs=30),
               LaneRecord(index=1, device="1", cpus=[2, 3], level=0.66, runs=2, failures=1,
                          dropped="slurm job 7 NODE_FAIL")]))
    view = build_view(results)
    assert view.lanes is not None and not any("lane" in n.lower() for n in view.sweep_notes)
    assert view.lanes.summary == ("Parallel sweep on 2 lane(s) through the slurm executor: 5.0 min of wall time, where "
                                  "its runs one after another would have taken about 18.3 min (speed-up 3.7×); "
                                  "lane-to-lane A/A spread 3.1%.")
    markdown = render_view_markdown(view)
    assert "## Lanes" in markdown and "| 1 | GPU 1 | 2,3 | 0.66× | 2 | 1 | slurm job 7 NODE_FAIL |" in markdown
    html = render_view_html(view)
    assert '<section id="lanes">' in html and '<a href="#lanes">' in html and "slurm job 7 NODE_FAIL" in html
    results.sweep.parallel = None
    assert build_view(results).lanes is None and "Lanes" not in render_view_markdown(build_view(results))


def test_an_executor_without_lanes_is_a_usage_error(capsys):
    assert main(["analyze", "x.py", "--executor", "ray"]) == EXIT_USER
    assert "--executor needs --lanes N or --devices LIST" in capsys.readouterr().err

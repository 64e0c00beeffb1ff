"""The gate across sessions and machines: a stored baseline's history, its between-session spread, and compat.

Synthetic CI jobs (tests.factories.make_runs): each session is one job's runs on one machine, with a run-to-run
noise of ~1.5% (a quiet H100 runner) and the machine's own offset. Two H100 nodes whose power caps differ by
6% run identical code 6% apart: counted as signal, that fails every job on the slower node (issue 25).
"""

from __future__ import annotations

import math
import random

import pytest

from perfscope.check import GateOptions, run_gate
from perfscope.check.baseline import BaselineHistory
from perfscope.check.sessions import DEFAULT_BETWEEN_HOST, DEFAULT_BETWEEN_SESSION, StoredSession, session_spread
from perfscope.cli import main
from tests.factories import make_results, make_runs

STEP_S = 0.1
RUN_CV = 0.015
POWER_CAP_OFFSET = 1.06  # node B's steps take 6% longer: the same code


def job(seed: int, *, host: str, slowdown: float = 1.0, offset_cv: float = 0.0, runs: int = 5, **env):
    """One CI job's results: ``runs`` fresh-process runs on ``host``, the job's own offset drawn at ``offset_cv``."""
    offset = random.Random(f"offset-{seed}").gauss(0, offset_cv) if offset_cv else 0.0  # apart from the runs' draws
    results = make_results(make_runs(median_s=STEP_S * slowdown * (1 + offset), runs=runs, run_cv=RUN_CV, seed=seed))
    results.environment.hostname = host
    results.environment.device_uuid = f"GPU-{host}"
    for key, value in env.items():
        setattr(results.environment, key, value)
    return results


def gate(current, sessions, *, max_drop=0.05, **options):
    history = BaselineHistory(sessions=sessions)
    return run_gate(current, history, GateOptions(metrics=("samples_per_s",), max_drop=max_drop, **options))


def said(verdict):
    """The verdict line's parameters, under the structural explanation a slower verdict carries."""
    message = verdict.message
    return (message.params["verdict"] if message.code == "verdict_with_structure" else message).params


# ------------------------------------------------------------------------ two machines, identical code

@pytest.mark.parametrize("seed", range(20))
def test_two_machines_6_percent_apart_never_fail_identical_code(seed):
    """Done-when of issue 25: baselines stored from node A and node B (6% slower), current on B, same code."""
    history = [job(1000 + seed, host="node-a"), job(2000 + seed, host="node-b", slowdown=POWER_CAP_OFFSET)]
    current = job(3000 + seed, host="node-b", slowdown=POWER_CAP_OFFSET, runs=3)
    report = gate(current, history)
    assert report.outcome in ("pass", "inconclusive"), report.verdicts[0].message
    assert any(n.code == "baseline_sessions" and len(n.params["runs"]) == 2 for n in report.notes)


def test_a_baseline_from_the_other_machine_alone_never_fails_identical_code():
    """One stored session (node A), current on node B: the old within-session rule (between_session=0) fails
    identical code in most of these jobs; the gate instead says it cannot tell a code change from a machine
    offset, and names the other host."""
    old, new = [], []
    for seed in range(10):
        stored = job(1000 + seed, host="node-a")
        current = job(3000 + seed, host="node-b", slowdown=POWER_CAP_OFFSET, runs=3)
        old.append(gate(current, [stored], between_session=0.0, between_host=0.0).outcome)
        report = gate(current, [stored])
        new.append(report.outcome)
        if report.outcome == "inconclusive":
            assert said(report.verdicts[0])["decides"].code == "decide_new_host"
        assert any(w.startswith("host: baseline 'node-a', current 'node-b'") for w in report.warnings)
    assert old.count("regression") >= 5, old  # the scenario is the hazard the issue describes
    assert "regression" not in new and "inconclusive" in new, new


def test_the_cli_exits_3_naming_the_reason_for_a_host_the_history_has_not_seen(tmp_path, capsys):
    base = job(1, host="node-a").save(tmp_path / "base.json")
    current = job(3, host="node-b", slowdown=POWER_CAP_OFFSET, runs=3).save(tmp_path / "cur.json")
    assert main(["check", str(current), "--baseline", str(base), "--metric", "samples_per_s"]) == 3
    out = capsys.readouterr().out
    assert "node-b is not in the history (1 host(s)): between-host spread assumed 5%" in out
    assert "the history has not seen this host" in out and "--between-host" in out and "perfscope ab" in out


# ------------------------------------------------------------------------ a real regression across sessions

@pytest.mark.parametrize("seed", range(10))
def test_a_real_6_percent_regression_fails_against_sessions_that_agree(seed):
    """Five stored jobs whose offsets spread by ~0.4%: a candidate with 6% less throughput in a fifth job is a
    regression at a 3% tolerance (at 5%, a 6% drop sits within the runs' noise of the threshold itself)."""
    history = [job(100 * seed + k, host=f"runner-{k}", offset_cv=0.004) for k in range(5)]
    current = job(100 * seed + 50, host="runner-9", slowdown=1 / 0.94, offset_cv=0.004)
    report = gate(current, history, max_drop=0.03)
    verdict = report.verdicts[0]
    assert report.outcome == "regression", verdict.message
    (basis,) = said(verdict)["runs"].params["basis"]  # one session per host: the host spread holds the days' too
    assert verdict.sessions == 5 and (basis.code, basis.params["unit"], basis.params["units"], basis.params["df"]) == (
        "spread_estimated", "host", 5, 4)


def test_the_between_session_spread_widens_the_interval():
    """Sessions that disagree by ~3% widen the interval beyond what the run-to-run noise alone gives."""
    history = [job(k, host=f"runner-{k}", offset_cv=0.03) for k in range(4)]
    current = job(99, host="runner-9", offset_cv=0.03)
    alone = gate(current, history, between_session=0.0, between_host=0.0).verdicts[0]
    across = gate(current, history).verdicts[0]
    assert across.high - across.low > 2 * (alone.high - alone.low)
    assert across.between_sd is not None and across.between_sd > 0.01


def test_one_session_fails_a_large_drop_from_the_first_day(tmp_path):
    """Issue 35: one stored session, 23% fewer samples/s on the same host: the assumed 5% between days still
    leaves the interval below -5%; a stated 2% narrows it."""
    base = job(1, host="node-a").save(tmp_path / "base.json")
    current = job(3, host="node-a", slowdown=1.3, runs=3).save(tmp_path / "cur.json")
    args = ["check", str(current), "--baseline", str(base), "--metric", "samples_per_s"]
    assert main(args) == 1
    assert main([*args, "--between-session", "2%"]) == 1


def test_session_spread_assumes_the_default_for_few_sessions_and_estimates_it_from_five():
    one = session_spread([StoredSession(values=[0.0, 0.01, -0.01], host="a")], [0.0, 0.01], current_host="a")
    tau2 = math.log1p(DEFAULT_BETWEEN_SESSION) ** 2
    assert one.assumed and one.between_sd == pytest.approx(math.sqrt(tau2))
    assert one.variance == pytest.approx(tau2 * 2 + 0.01 ** 2 / 2 / 2 + 0.01 ** 2 / 3)  # tau(1 + 1/J) + Welch
    means = [0.0, 0.1, 0.2, 0.1, 0.1]
    five = session_spread([StoredSession(values=[m, m], host="a") for m in means], [0.1, 0.1], current_host="a")
    # session means spread .005 with 4 df, no run noise at all: used as is, times (1 + 1/J)
    assert not five.assumed and five.df == 4 and five.variance == pytest.approx(0.005 * (1 + 1 / 5))
    assert five.baseline_level == pytest.approx(0.1) and five.hosts == 1 and not five.new_host


def test_a_new_host_adds_the_between_host_term():
    stored = [StoredSession(values=[0.0, 0.01, -0.01], host=h) for h in "aaaaaa"]
    same = session_spread(stored, [0.0, 0.01], current_host="a")
    other = session_spread(stored, [0.0, 0.01], current_host="b")
    eta2 = math.log1p(DEFAULT_BETWEEN_HOST) ** 2
    assert other.new_host and other.variance == pytest.approx(same.variance + eta2 * 2, rel=0.05)
    stated = session_spread(stored, [0.0, 0.01], current_host="b", between_host=0.0)
    assert stated.variance < other.variance and not stated.assumed


# ------------------------------------------------------------------------ compat

def test_compat_refuses_and_names_every_field_that_changes_throughput(tmp_path, capsys):
    base = job(1, host="node-a", cpu_cores_usable=4.0, driver_version="550.54", cuda_version="12.4").save(tmp_path / "b.json")
    current = job(2, host="node-b", cpu_cores_usable=2.0, driver_version="535.1", cuda_version="12.1",
                  torch_version="2.12.0", runs=3).save(tmp_path / "c.json")
    args = ["check", str(current), "--baseline", str(base), "--metric", "samples_per_s"]
    assert main(args) == 4  # not comparable: the history cannot judge another machine (issue 35), not an input error
    err = capsys.readouterr().err
    assert "not comparable: usable CPU cores (affinity, cgroup quota) 4.0 → 2.0" in err
    for line in ("usable CPU cores (affinity, cgroup quota): baseline 4.0, current 2.0",
                 "torch version: baseline '2.13.0', current '2.12.0'",
                 "CUDA version: baseline '12.4', current '12.1'",
                 "GPU driver version: baseline '550.54', current '535.1'"):
        assert line in err, err
    assert "host:" not in err.split("not comparable")[1]  # another host of the same kind is not refused ...
    assert main([*args, "--allow-mismatch", "--between-session", "0%", "--between-host", "0%"]) in (0, 3)
    out = capsys.readouterr().out
    assert "warning: host: baseline 'node-a', current 'node-b'" in out and "warning: GPU UUID" in out  # ... but named


def test_baseline_update_refuses_a_session_from_another_core_count(tmp_path, capsys):
    dest = tmp_path / "base.json"
    assert main(["baseline", "save", str(job(1, host="a", cpu_cores_usable=4.0).save(tmp_path / "a.json")),
                 "--to", str(dest)]) == 0
    before = dest.read_bytes()
    other = job(2, host="b", cpu_cores_usable=2.0).save(tmp_path / "b.json")
    assert main(["baseline", "update", str(other), "--to", str(dest)]) == 2
    assert "usable CPU cores" in capsys.readouterr().err
    assert dest.read_bytes() == before


def test_a_results_file_without_core_counts_only_warns(tmp_path, capsys):
    """An older writer recorded no usable cores: named as unknown, never refused."""
    base = job(1, host="a", cpu_cores_usable=None).save(tmp_path / "b.json")
    current = job(2, host="a", cpu_cores_usable=2.0, runs=3).save(tmp_path / "c.json")
    assert main(["check", str(current), "--baseline", str(base), "--metric", "samples_per_s", "--between-session", "0%"]) == 0
    assert "usable CPU cores (affinity, cgroup quota): baseline None, current 2.0 (not recorded in one file)" in capsys.readouterr().out


def test_identical_code_across_offset_sessions_fails_at_the_design_rate():
    """Jobs whose machine/day offsets spread by 3%, identical code, 3 stored sessions: the session term keeps false
    alarms near the 2.5% the rule promises (6 of 300 here); pooling the runs as one population (the old rule)
    fails far more often (28 of 300)."""
    new = old = 0
    for seed in range(300):
        history = [job(1000 * seed + k, host=f"runner-{k}", offset_cv=0.03) for k in range(3)]
        current = job(1000 * seed + 500, host="runner-9", offset_cv=0.03, runs=3)
        new += gate(current, history).outcome == "regression"
        old += gate(current, history, between_session=0.0, between_host=0.0).outcome == "regression"
    assert new <= 12, new  # 4%: the nominal 2.5% plus sampling error of 300 draws
    assert old >= max(3 * new, 20), (old, new)  # 28 of 300 here

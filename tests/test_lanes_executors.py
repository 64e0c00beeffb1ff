"""The parallel sweep through each executor, with real trials on this machine's 2 cores (2 lanes of 1 core each):
local subprocesses, Ray started locally, and a real single-node Slurm (Debian's slurm-wlm and munge, configured
and started here; submitit's local executor only where Slurm cannot start, saying so in the skip reason's place:
the log and the test's name).

What the load on a shared machine cannot move decides: which lane each run ran on, that it could use only its
lane's core, the pause-bound gain of the larger micro-batch in every pair (a sleep: 4 pauses per 16 samples against
1), the recommendation where the runs were evidence, a lane's failure and the executor's reason, and what Ctrl-C
leaves behind.
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from perfscope.cli import main
from perfscope.errors import EXIT_INTERRUPTED
from perfscope.results import Results
from tests.waiting import ctrl_c_reaches_it

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "workloads" / "step_pause.py"
HOLD_ENV = "PERFSCOPE_TEST_HOLD_FILE"
"""step_pause.py's hold: while the file it names exists, a lane's trial waits in its model's construction."""
ARGS = ["--device", "cpu", "--only", "grad_accum", "--max-runs", "4", "--no-trace", "--steps", "6", "--warmup", "2",
        "--lanes", "2"]
"""4 runs a candidate at most: the best variant's first run only selected it, the other 3 (MIN_DECIDING_RUNS) judge
it, and the pause-bound gain (4 pauses against 1) decides at that look; 4 confirmation runs. (3 left it 2 judging
runs, never decidable; each run more through Slurm or Ray is a job's start-up.)"""
TWO_CORES = len(os.sched_getaffinity(0)) >= 2
AFTER_RUNS = 6
"""Finished runs before a lane's job is ended from outside: the probe, the sequential baseline and the A/A check."""


def _analyze(out: Path, executor: str) -> Results:
    code = main(["analyze", str(WORKLOAD), "--out", str(out), "--executor", executor, *ARGS])
    assert code == 0
    return Results.load(out / "results.json")


def _neighbour_ratio(results: Results, run) -> float:
    """The run's samples/s over its lane's nearest baseline runs' (before and after), excluded runs included: a
    sleep-bound gain that no neighbour's load can hide."""
    base = sorted((t for t in results.trials if t.configuration == "baseline" and t.lane == run.lane and t.ok),
                  key=lambda t: t.sequence)
    near = [t for t in base if t.sequence < run.sequence][-1:] + [t for t in base if t.sequence > run.sequence][:1]
    level = sum(math.log(t.metrics.samples_per_s) for t in near) / len(near)
    return run.metrics.samples_per_s / math.exp(level)


def check_sweep(results: Results, executor: str, *, lost: int | None = None) -> None:
    """The sweep on 2 pinned lanes reached the pause-bound recommendation; ``lost``: the lane an outside hand ended
    (its run in flight then is the only failed one)."""
    parallel = results.sweep.parallel
    assert parallel is not None and parallel.executor == executor
    assert [r.index for r in parallel.lanes] == [0, 1]
    assert [r.index for r in parallel.lanes if r.dropped] == ([] if lost is None else [lost]), parallel
    on_lanes = [t for t in results.trials if t.lane is not None]
    assert {t.lane for t in on_lanes} == {0, 1}
    failed = [t for t in on_lanes if not t.ok]
    assert len(failed) == (0 if lost is None else 1) and all(t.lane == lost for t in failed), failed
    for trial in (t for t in on_lanes if t.ok):  # pinned to the lane's core (local and Ray: trial.pin; Slurm: its allocation)
        assert {w.contention.usable_cores for w in trial.metrics.windows if w.contention} == {1.0}, trial.name
    accum = [t for t in on_lanes if t.configuration != "baseline" and t.config.micro_batch_size == 16]
    assert accum and all(_neighbour_ratio(results, t) > 2.0 for t in accum), [_neighbour_ratio(results, t) for t in accum]
    outcome = next(o for o in results.sweep.knobs if o.knob == "grad_accum")
    if outcome.gain is not None and outcome.gain.verdict == "faster":
        assert results.sweep.recommended_knobs == ["grad_accum"], results.sweep.recommended_knobs
    else:  # a neighbour's load spoiled the evidence: never a win, and the results say why
        assert results.sweep.recommended_trial == "baseline"
        assert any(w.code == "persistent_load" for w in results.warnings), results.warnings
    assert parallel.wall_s and parallel.sequential_estimate_s


@pytest.mark.skipif(not TWO_CORES, reason="2 lanes of 1 core need 2 cores")
def test_the_local_executor_sweeps_on_two_pinned_lanes(tmp_path):
    check_sweep(_analyze(tmp_path / "out", "local"), "local")


# ------------------------------------------------------------------------------------------------------ Ray


@pytest.fixture
def ray_env(monkeypatch):
    """Ray started locally with this machine's 2 cores (the executor then uses it, as it would a user's cluster)."""
    ray = pytest.importorskip("ray", reason="Ray is the optional extra perfscope[ray]")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster: no token to generate
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    from perfscope.errors import UserError
    from perfscope.lanes.ray import _init

    try:
        _init(ray, None, 2)  # ray.init(num_cpus=2), retried: Ray gives its raylet a fixed 30 s to come up
    except UserError as exc:
        pytest.skip(f"Ray could not start on this machine under its current load: {exc}")
    yield
    ray.shutdown()


@pytest.mark.skipif(not TWO_CORES, reason="2 lanes of 1 core need 2 cores")
def test_the_ray_executor_reaches_the_same_recommendation_when_a_worker_is_killed_mid_sweep(tmp_path, ray_env):
    """One sweep shows both (a Ray sweep costs minutes here): the recommendation through Ray, and a worker killed
    after the A/A check drops its lane while the sweep goes on on the other."""
    import psutil

    def kill_one() -> int | None:  # a Ray worker running a trial, SIGKILLed from outside (a dead worker)
        for proc in psutil.process_iter(["cmdline"]):
            if (proc.info["cmdline"] or [""])[0].startswith("ray::run_trial_job"):
                proc.kill()
                return proc.pid
        return None

    results, _, dropped = sweep_losing_a_lane(tmp_path / "out", "ray", kill_one)
    assert dropped.dropped.startswith(f"ray task on lane {dropped.index}: "), dropped
    assert "Worker" in dropped.dropped or "died" in dropped.dropped, dropped.dropped
    check_sweep(results, "ray", lost=dropped.index)


def sweep_losing_a_lane(out: Path, executor: str, end_one: Callable[[], object | None], hold: Path | None = None):
    """The sweep while ``end_one`` (polled from a thread until it returns what it ended) ends one lane's job from
    outside: (results, what it ended, the dropped lane's record), once the lane is dropped and the sweep went on.
    ``hold``: the workload's hold file (step_pause.HOLD_ENV), created while the job is ended, so that the trials
    then starting wait before their timed window and the job ended is surely one whose trial has not finished (a
    job ended after its trial wrote its result has lost nothing, and the lane rightly stays)."""
    ended: list[object] = []

    def poll() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not ended:
            # after the A/A check (the probe, a baseline and 2 runs per lane): both lanes have candidate runs to lose
            if len(list(out.glob("trials/*/result.json"))) >= AFTER_RUNS:
                if hold is not None:  # the runs in flight finish; the next ones wait in their model's construction
                    hold.touch()
                if (what := end_one()) is not None:
                    ended.append(what)
            time.sleep(0.5)
        if hold is not None:
            hold.unlink(missing_ok=True)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    results = _analyze(out, executor)
    thread.join(timeout=1)
    assert ended
    dropped = [r for r in results.sweep.parallel.lanes if r.dropped]
    assert len(dropped) == 1, results.sweep.parallel
    kept = next(r.index for r in results.sweep.parallel.lanes if not r.dropped)
    last = max(t.sequence for t in results.trials)
    assert next(t for t in results.trials if t.sequence == last).lane == kept  # the sweep went on on the other lane
    assert results.sweep.recommended_trial is not None
    return results, ended[0], dropped[0]


# ---------------------------------------------------------------------------------------------------- Slurm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_slurm(root: Path) -> tuple[dict[str, str], list[Path]]:
    """munged, slurmctld and slurmd of a one-node cluster of this machine, under ``root``; (env, pid files)."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed (apt-get install slurm-wlm munge)")
    node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    munge = root / "munge"
    munge.mkdir(mode=0o700, parents=True)
    socket_path = munge / "munge.socket"
    subprocess.run(["munged", "--force", f"--socket={socket_path}", f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}"], check=True)
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=perfscope", f"SlurmctldHost={socket.gethostname()}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={socket_path}", f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}", f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}", f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        node.replace(node.split()[0], f"NodeName={socket.gethostname()}"),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {"SLURM_CONF": str(conf)}
    pids = [munge / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid"]
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon, "-f", str(conf)], check=True, env={**os.environ, **env})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False,
                               env={**os.environ, **env})
        if state.stdout.strip() == "idle":
            return env, pids
        time.sleep(1)
    raise RuntimeError(f"the node did not come up: {state.stdout or state.stderr}; see {root}")


def _stop(pid_files: list[Path]) -> None:
    for path in reversed(pid_files):  # slurmd, slurmctld, then munged: the processes this fixture started
        try:
            os.kill(int(path.read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A real Slurm where it can start; else submitit's local executor, said on stderr (never a mock of Slurm)."""
    pytest.importorskip("submitit", reason="submitit is the optional extra perfscope[slurm]")
    root = Path("/tmp") / f"perfscope-slurm-{os.getpid()}"  # short: a unix socket's path must fit 108 bytes
    try:
        env, pids = _start_slurm(root)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
        warnings.warn(f"Slurm could not start here ({exc}): the Slurm executor's tests run through submitit's "
                      "LocalExecutor, and those that need a real Slurm skip", stacklevel=1)
        yield "local"
        return
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield "slurm"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stop(pids)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm_cluster(slurm, monkeypatch):
    import perfscope.lanes.slurm as executor

    monkeypatch.setattr(executor, "CLUSTER", slurm)
    monkeypatch.setattr(executor, "CHECK_EVERY_S", 2.0)
    return slurm


def _jobs() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not TWO_CORES, reason="2 lanes of 1 core need 2 cores")
def test_the_slurm_executor_reaches_the_same_recommendation_when_a_job_is_cancelled_mid_sweep(tmp_path, slurm_cluster,
                                                                                            monkeypatch):
    """One sweep shows both (a Slurm sweep costs minutes here): the recommendation through Slurm, and a job
    scancelled after the A/A check drops its lane while the sweep goes on. Where Slurm could not start, submitit's
    LocalExecutor gives the recommendation and nothing can be scancelled."""
    if slurm_cluster != "slurm":
        check_sweep(_analyze(tmp_path / "out", "slurm"), "slurm")
        return

    out, hold = tmp_path / "out", tmp_path / "hold"

    def cancel_one() -> str | None:
        """A job whose trial is held before its timed window (step_pause.py names the job in its held marker): one
        whose trial surely has not finished, whatever the machine's load. One held job is enough (a lane may be
        idle then: a wave with one run, a contended run measured again)."""
        running = set(_jobs())
        for marker in sorted(tmp_path.glob("hold.held-*")):
            if (job := marker.read_text().strip()) in running:
                subprocess.run(["scancel", job], check=True)
                return job
        return None

    monkeypatch.setenv(HOLD_ENV, str(hold))  # sbatch exports it to the jobs
    results, job, dropped = sweep_losing_a_lane(out, "slurm", cancel_one, hold)
    assert f"slurm job {job} CANCELLED" in dropped.dropped, dropped
    check_sweep(results, "slurm", lost=dropped.index)


# ---------------------------------------------------------------------------------------------------- Ctrl-C


@pytest.mark.skipif(not TWO_CORES, reason="2 lanes of 1 core need 2 cores")
@pytest.mark.parametrize("executor", ["local", "slurm", "ray"])
def test_ctrl_c_cancels_the_lanes_runs_and_still_reports(tmp_path, executor, request):
    """Ctrl-C once both lanes' first trials are held in flight (step_pause.py's hold: they wait in their model's
    construction, the runs before the lanes go on): what it leaves behind, whatever the machine's speed."""
    if executor == "slurm" and request.getfixturevalue("slurm") != "slurm":
        pytest.skip("needs a real Slurm to scancel its jobs (Slurm could not start here)")
    if executor == "ray":
        pytest.importorskip("ray", reason="Ray is the optional extra perfscope[ray]")
    out, hold = tmp_path / "out", tmp_path / "hold"
    hold.touch()
    args = [sys.executable, "-m", "perfscope", "analyze", str(WORKLOAD), "--out", str(out), *ARGS, "--executor", executor]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_AUTH_MODE": "disabled", HOLD_ENV: str(hold)}
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                            preexec_fn=ctrl_c_reaches_it)
    assert proc.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, proc.stderr), lines.put(None)], daemon=True).start()
    seen: list[str] = []
    while len(list(tmp_path.glob("hold.held-*"))) < 2:  # a trial held on each lane (a lane runs one at a time)
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            if executor == "ray" and "Ray did not start" in "".join(seen):
                pytest.skip("Ray could not start on this machine under its current load: " + seen[-1].strip())
            raise AssertionError("the sweep ended before both lanes held a trial:\n" + "".join(seen))
        seen.append(line)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=240)
    rest = "".join(iter(lambda: lines.get(timeout=60), None))
    assert proc.returncode == EXIT_INTERRUPTED, "".join(seen) + rest
    results = Results.load(out / "results.json")
    cancelled = [t for t in results.trials if t.lane is not None and t.error and "cancelled by Ctrl-C" in t.error]
    assert {t.lane for t in cancelled} == {0, 1}, [(t.name, t.status, t.error) for t in results.trials]
    assert "lanes_interrupted" in {n.code for n in results.sweep.parallel.notes}, results.sweep.parallel.notes
    assert results.sweep.parallel.lanes[0].runs >= 1  # the lanes table is still reported
    if executor == "slurm":  # every job it submitted was scancelled
        left = subprocess.run(["squeue", "-h", "-t", "PENDING,RUNNING", "-o", "%i"], capture_output=True, text=True,
                              check=True)
        assert not left.stdout.split(), left.stdout

"""Distributed trials on this CPU (gloo, 2 ranks): per-rank metrics, and a rank that crashes, dies or hangs named in
the trial's status, with no process left behind. Each test is a real torchrun job of fresh interpreters."""

from pathlib import Path

import psutil
import pytest

from perfscope.measure.mfu import choose_peak
from perfscope.results import Environment, Results, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.trial.launch import Launch
from perfscope.trial.session import Progress, Session
from tests.waiting import wait_gone

WORKLOADS = Path(__file__).parent / "workloads"
pytestmark = pytest.mark.slow

DDP = TrialConfig(micro_batch_size=8, steps=6, warmup_steps=1, nproc_per_node=2, data_parallel="ddp", count_flops=False,
                  sample_utilization=False)


def _session(tmp_path: Path, *, timeout_s: float = 120, collective_timeout_s: float = 60) -> Session:
    results = Results(
        environment=Environment(device_type="cpu", device_name="test cpu", measured_ceiling_tflops={"fp32": 0.1}),
        workload=WorkloadInfo(path=str(WORKLOADS / "ddp_ranks.py"), sha256="x", name="ddp_ranks"),
    )
    results.peak = choose_peak(results.environment)
    return Session(results, out_dir=tmp_path, workload_path=WORKLOADS / "ddp_ranks.py", timeout_s=timeout_s,
                   progress=Progress(), contention_retries=0,
                   launch=Launch(nproc_per_node=2, collective_timeout_s=collective_timeout_s))


def _leftovers(tmp_path: Path) -> list[int]:
    """Processes still running a spec under tmp_path (ranks, agents, DataLoader workers of this test's jobs) once
    each has had up to 30 s to end: the job was killed, so each ends at once; the wait is for the kernel, not a guess."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and str(tmp_path) in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return wait_gone(found, timeout_s=30)


def test_a_ddp_trial_records_every_rank_and_the_job(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFSCOPE_TEST_RANK_MODE", raising=False)
    trial = _session(tmp_path).measure("baseline", DDP.replace(capture_trace=True, count_flops=True))
    assert trial.status == "ok", trial.error
    facts = trial.metrics.distributed
    assert facts.world_size == 2 and facts.backend == "gloo" and facts.data_parallel == "ddp"
    assert facts.global_batch == 16
    assert [r.rank for r in facts.ranks] == [0, 1]
    for rank in facts.ranks:
        assert rank.steps == 6 and rank.samples == 48 and len(rank.step_times_s) == 6
        assert rank.samples_per_s == pytest.approx(48 / rank.wall_s)
        assert len(rank.local_step_times_s) == 10 and all(t > 0 for t in rank.local_step_times_s)  # at least 10
        assert rank.parameter_bytes == (32 * 64 + 64 + 64 * 10 + 10) * 4
    slowest = max(r.wall_s for r in facts.ranks)
    assert trial.metrics.samples_per_s == pytest.approx(96 / slowest)  # all ranks' work over the slowest window
    assert facts.job_samples_per_s == trial.metrics.samples_per_s
    # per device at the job's pace; on CPU the 2 ranks share the machine's one peak
    assert trial.metrics.mfu == pytest.approx(trial.metrics.flops_per_step * 6 / slowest / (0.1e12 / 2))
    assert (tmp_path / "trials" / "baseline" / "trace" / "rank0.json.gz").exists()
    assert (tmp_path / "trials" / "baseline" / "trace" / "rank1.json.gz").exists()
    held = trial.metrics.memory_categories  # rank 0's profiled step, after the trace window every rank took
    assert held is not None and held.at_peak["parameter"] == (32 * 64 + 64 + 64 * 10 + 10) * 4, trial.metrics.unavailable
    assert Results.load(tmp_path / "results.json").trial("baseline").metrics.distributed.world_size == 2
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("mode", "status", "message"),
    [
        ("crash", "error", "rank 1: ValueError: shapes do not match"),
        ("segfault", "crashed", "rank 1: process killed by signal SIGSEGV"),
    ],
)
def test_a_failing_rank_is_named(tmp_path, monkeypatch, mode, status, message):
    monkeypatch.setenv("PERFSCOPE_TEST_RANK_MODE", mode)
    trial = _session(tmp_path).measure("t", DDP)
    assert trial.status == status
    assert message in (trial.error or ""), trial.error
    assert Results.load(tmp_path / "results.json").trial("t").status == status
    assert _leftovers(tmp_path) == []


def test_a_hanging_rank_is_a_timeout_naming_it_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSCOPE_TEST_RANK_MODE", "hang")
    trial = _session(tmp_path, timeout_s=300, collective_timeout_s=5).measure("t", DDP)
    assert trial.status == "timeout"
    # The collective timeout ended it, not the trial's 300 s: decided on which mechanism reported, not on a wall-clock
    # bound (torchrun's start alone moves by tens of seconds on a loaded machine).
    assert "rank 1 stopped responding" in trial.error and "rank(s) 0" in trial.error, trial.error
    assert "trial exceeded" not in trial.error, trial.error
    assert _leftovers(tmp_path) == []


def test_the_trial_timeout_kills_the_whole_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSCOPE_TEST_RANK_MODE", "hang")
    # 12 s: the hanging-rank test above shows the ranks hang within ~6 s of the launch on this machine; had a loaded
    # machine not started them yet, the whole job must still be gone.
    trial = _session(tmp_path, timeout_s=12, collective_timeout_s=600).measure("t", DDP)
    assert trial.status == "timeout"
    assert "exceeded 12 s" in trial.error, trial.error
    assert _leftovers(tmp_path) == []


def test_a_straggler_is_named(tmp_path, monkeypatch):
    """A real 2-rank job whose ranks time their steps on a simulated clock (tests/workloads/ddp_ranks.py): rank 1's
    compute is 31 ms a step to rank 0's 1 ms, exactly, so that it is named does not depend on where a loaded
    machine's preemptions land in rank 0's sub-millisecond steps (a real 30 ms sleep against a burst of 30 ms)."""
    from perfscope.measure.ranks import find_stragglers

    monkeypatch.setenv("PERFSCOPE_TEST_RANK_MODE", "straggle")
    monkeypatch.setenv("PERFSCOPE_TEST_STRAGGLE_S", "0.03")
    monkeypatch.setenv("PERFSCOPE_TEST_SIM_CLOCK", "1")
    trial = _session(tmp_path).measure("t", DDP.replace(steps=12))
    assert trial.status == "ok", trial.error
    facts = trial.metrics.distributed
    local = {r.rank: r.local_step_times_s for r in facts.ranks}
    assert len(local[0]) == len(local[1]) >= 3, local  # each rank ran its window without gradient communication
    assert all(abs(t - 0.00105) < 0.00006 for t in local[0]) and all(abs(t - 0.03105) < 0.00006 for t in local[1]), local
    assert [s.rank for s in facts.stragglers] == [1], facts.straggler_method
    assert facts.stragglers[0].slowest_share == 1.0 and facts.stragglers[0].slower_by > 20
    assert (facts.stragglers, facts.straggler_method) == find_stragglers(facts.ranks)  # decided on what the ranks measured


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_local_nodes_run_one_job_and_the_worker_stops(tmp_path, monkeypatch):
    """Multi-node, as far as one machine can test it: two torchrun agents (--nnodes 2, static rendezvous), node 1 a
    `perfscope worker` that learns each trial from rank 0, and the stop job that ends it."""
    import subprocess
    import sys

    from perfscope.trial.follower import stop_followers

    monkeypatch.delenv("PERFSCOPE_TEST_RANK_MODE", raising=False)
    endpoint = f"127.0.0.1:{_free_port()}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "perfscope", "worker", str(WORKLOADS / "ddp_ranks.py"), "--device", "cpu", "--nnodes", "2",
         "--node-rank", "1", "--nproc-per-node", "1", "--rdzv-endpoint", endpoint, "--out", str(tmp_path / "worker")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        launch = Launch(nproc_per_node=1, nnodes=2, node_rank=0, rdzv_endpoint=endpoint, collective_timeout_s=60)
        session = _session(tmp_path)
        session.launch = launch
        trial = session.measure("baseline", DDP.replace(nproc_per_node=1, nnodes=2))
        assert trial.status == "ok", trial.error
        facts = trial.metrics.distributed
        assert facts.world_size == 2 and facts.nnodes == 2 and facts.nproc_per_node == 1
        assert [r.rank for r in facts.ranks] == [0, 1] and all(r.samples == 48 for r in facts.ranks)
        assert stop_followers(launch, tmp_path / "stop", device="cpu") == "stop"
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0, out
        assert "analysis is over" in out
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert _leftovers(tmp_path) == []


def test_communication_heavy_training_gets_no_sync_measured_and_ranked(tmp_path, monkeypatch):
    """Large gradients, little compute, 4 micro-batches that each all-reduce: `no_sync` accumulation (same global
    batch) is measured against the baseline, run for run. One run of it (--max-runs 1: each run is a torchrun job of
    fresh interpreters): fewer than MIN_DECIDING_RUNS never decide, so the sweep must not recommend it, and the
    report ranks the findings. (Whether it is decidedly faster is a timing question: benchmarks/distributed_cpu.py.)"""
    from perfscope.cli import main
    from perfscope.rules import partition_findings

    monkeypatch.delenv("PERFSCOPE_TEST_RANK_MODE", raising=False)
    code = main(["analyze", str(WORKLOADS / "ddp_comm_heavy.py"), "--device", "cpu", "--nproc-per-node", "2",
                 "--out", str(tmp_path), "--only", "no_sync_accumulation", "--warmup", "2", "--steps", "8", "--max-runs", "1",
                 "--no-budget"])
    assert code == 0
    results = Results.load(tmp_path / "results.json")
    baseline = results.trial("baseline")
    assert baseline.config.data_parallel == "ddp" and not baseline.config.no_sync and baseline.config.grad_accum_steps == 4
    comm = baseline.metrics.distributed.communication
    assert comm is not None and comm.collective_s > 0
    outcome = next(k for k in results.sweep.knobs if k.knob == "no_sync_accumulation")
    assert outcome.status == "measured", outcome.reason
    runs = [t for t in results.trials if t.configuration == outcome.trial]
    assert runs and all(t.config.no_sync and t.config.global_batch == baseline.config.global_batch for t in runs)
    measured = [t for t in runs if t.evidence]
    if not measured or not results.runs("baseline"):
        # Every run of a side measured a neighbour's load. Not a skip: what perfscope must then do is decided — say
        # so at the top of the results, and recommend nothing it could not measure.
        assert any(w.code == "persistent_load" for w in results.warnings), results.warnings
        assert "no_sync_accumulation" not in results.sweep.recommended_knobs
        return
    assert outcome.gain is not None and outcome.gain.runs == 1
    assert outcome.gain.verdict == "undecided" and "no_sync_accumulation" not in results.sweep.recommended_knobs
    ranked, _ = partition_findings(results.findings)
    assert not any(f.trial == outcome.trial and f.measured_win for f in ranked)  # no win credited to one run
    assert (tmp_path / "report.html").read_text().count("rank") > 2


def test_a_workload_that_wraps_its_own_model_is_probed_and_measured_as_it_is(tmp_path):
    from perfscope.cli import main

    code = main(["analyze", str(WORKLOADS / "ddp_wraps_itself.py"), "--device", "cpu", "--nproc-per-node", "2",
                 "--out", str(tmp_path), "--no-sweep", "--no-trace", "--steps", "4", "--warmup", "1"])
    assert code == 0
    baseline = Results.load(tmp_path / "results.json").trial("baseline")
    assert baseline.status == "ok", baseline.error
    assert baseline.config.data_parallel == "none"  # the user's own DDP, not wrapped twice
    assert baseline.metrics.distributed.world_size == 2

"""perfscope.Profiler on every rank of a user's own torchrun job: one results.json, the job's throughput, the gate.

One 2-rank gloo job (tests/hooks_ddp_job.py, a tiny DDP loop) serves every test here: launching torchrun is most
of the cost.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.check import GateOptions, run_gate
from perfscope.cli import main as cli_main
from perfscope.results import Results

SCRIPT = Path(__file__).with_name("hooks_ddp_job.py")
ROOT = Path(__file__).parents[1]
STEPS, WARMUP, BATCH, TRACED = 25, 2, 8, 3  # per rank (hooks_ddp_job.py): steps 20-22 are traced
MEMORY = 2  # steps 23-24: the memory-by-category window after the trace (Profiler(memory=True))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp-hooks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT), str(out)],
        env=env, capture_output=True, text=True, timeout=300, cwd=out,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return out


def returned(job: Path, rank: int) -> dict[str, str]:
    return json.loads((job / f"returned{rank}.json").read_text())


def test_rank_0_writes_the_one_results_file_of_the_job(job: Path) -> None:
    assert sorted(p.relative_to(job).as_posix() for p in job.rglob("results.json")) == [
        "job/results.json", "late/results.json", "snap/results.json"]  # no per-rank folders
    assert returned(job, 0)["job"] == str(job / "job" / "results.json")
    assert returned(job, 1) == {"snap": "None", "job": "None"}  # the other ranks write nothing
    results = Results.load(job / "job" / "results.json")
    trial = results.trials[0]
    m, facts = trial.metrics, trial.metrics.distributed
    assert facts is not None and facts.world_size == 2 and [r.rank for r in facts.ranks] == [0, 1]
    assert (facts.backend, facts.nnodes, facts.nproc_per_node, facts.data_parallel) == ("gloo", 1, 2, "ddp")
    assert (trial.config.data_parallel, trial.config.world_size, facts.global_batch) == ("ddp", 2, 2 * BATCH)
    for rank in facts.ranks:
        assert rank.steps == STEPS - WARMUP - 1 - TRACED - MEMORY  # warm-up, FLOP-counting, traced, memory: not timed
        assert rank.samples == rank.steps * BATCH and len(rank.step_times_s) == rank.steps
        assert rank.samples_per_s == pytest.approx(rank.samples / rank.wall_s)
        assert rank.parameter_bytes == rank.gradient_bytes == (32 * 64 + 64 + 64 * 16 + 16) * 4  # replicated (DDP)
        assert rank.optimizer_state_bytes >= 2 * rank.parameter_bytes and rank.peak_memory_bytes > 0
    # The job's throughput: every rank's samples over the slowest rank's window, recomputed here.
    job_rate = sum(r.samples for r in facts.ranks) / max(r.wall_s for r in facts.ranks)
    assert m.samples_per_s == pytest.approx(job_rate) and facts.job_samples_per_s == pytest.approx(job_rate)
    assert m.samples_per_s < sum(r.samples_per_s for r in facts.ranks) + 1e-9
    # MFU stays per device: job FLOP/s over (world size × peak); the peak is 1 TFLOP/s here, and on a CPU the node's
    # two ranks share it (each rank's device is half the machine).
    steps_per_rank_s = sum(r.steps for r in facts.ranks) / 2 / max(r.wall_s for r in facts.ranks)
    assert m.mfu == pytest.approx(m.flops_per_step * steps_per_rank_s / (1e12 / 2))
    assert m.steps == facts.ranks[0].steps and m.step_times_s == facts.ranks[0].step_times_s  # the rest is rank 0's
    held = m.memory_categories  # rank 0's window, every rank having taken it in step (DDP's collectives in both)
    assert held is not None and held.at_peak["parameter"] == (32 * 64 + 64 + 64 * 16 + 16) * 4, m.unavailable


def test_every_ranks_trace_is_in_rank_0s_trace_folder(job: Path) -> None:
    m = Results.load(job / "job" / "results.json").trials[0].metrics
    assert m.trace_path == "trace/rank0.json.gz"
    assert sorted(p.name for p in (job / "job" / "trace").iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    with gzip.open(job / "job" / "trace" / "rank1.json.gz", "rt") as fh:
        assert json.load(fh)["distributedInfo"]["rank"] == 1


def test_a_snapshot_goes_through_gather_object_where_there_is_no_store(job: Path) -> None:
    snap = Results.load(job / "snap" / "results.json")
    m = snap.trials[0].metrics
    assert [r.rank for r in m.distributed.ranks] == [0, 1]
    assert m.samples_per_s == pytest.approx(sum(r.samples for r in m.distributed.ranks)
                                            / max(r.wall_s for r in m.distributed.ranks))
    # The snapshot's own writing is not a step's time: the final window's steps stay a few milliseconds.
    final = Results.load(job / "job" / "results.json").trials[0].metrics
    assert final.excluded_s.get("snapshot save()", 0) > 0
    assert max(final.step_times_s) < final.excluded_s["snapshot save()"]


def test_a_rank_that_never_saves_is_named_and_no_job_figure_is_guessed(job: Path) -> None:
    late = Results.load(job / "late" / "results.json")
    m = late.trials[0].metrics
    assert m.distributed.world_size == 2 and [r.rank for r in m.distributed.ranks] == [0]
    why = m.unavailable["samples_per_s"]
    assert m.samples_per_s is None and why.code == "job_figure_unknown" and why.params["why"].params["ranks"] == [1]
    assert any(n.code == "job_figures_unavailable" and n.params["why"].params["ranks"] == [1] for n in late.notes)


def test_check_gates_the_jobs_throughput(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final, snap = Results.load(job / "job" / "results.json"), Results.load(job / "snap" / "results.json")
    report = run_gate([final, snap], snap, GateOptions(metrics=("samples_per_s", "mfu", "step_time")))
    assert report.errors == [] and report.blocking_differences == []  # same world size: comparable
    samples = report.verdicts[0]
    assert samples.baseline == pytest.approx(snap.trials[0].metrics.samples_per_s)  # the job's, not rank 0's
    assert len(report.verdicts) == 3 and samples.n_current == 2
    path = str(job / "job" / "results.json")
    assert cli_main(["check", path, path, "--baseline", path, "--metric", "samples_per_s", "--between-session", "0%"]) == 0
    assert "samples/s" in capsys.readouterr().out


def test_the_peers_load_is_the_job_not_a_neighbour() -> None:
    """psutil sees the other ranks on a node as other processes: their own cores are taken out, per node."""
    from perfscope.hooks.distributed import RankPlace, RankReport, layout, without_peers
    from perfscope.results import RankMetrics

    def report(rank: int, node: str, other: float, own: float | None) -> RankReport:
        return RankReport(rank=rank, own_cpu_cores=own, metrics=RankMetrics(rank=rank, node=node, other_cpu_cores=other))

    reports = [report(0, "a", 1.5, 1.0), report(1, "a", 1.25, 1.0), report(2, "b", 0.5, 1.0), report(3, "b", 2.0, None)]
    without_peers(reports)
    assert [r.metrics.other_cpu_cores for r in reports] == [0.5, 0.25, 0.5, 1.0]  # rank 2's peer (3) is unknown
    assert reports[2].metrics.unavailable["other_cpu_cores"].code == "includes_peer_ranks"
    place = RankPlace(rank=0, world_size=4, local_rank=0, local_world_size=None, node="a", backend="gloo")
    assert layout(place, reports) == (2, 2)
    assert layout(place, reports[:3]) == (1, 4)  # a rank missing and no LOCAL_WORLD_SIZE: one node assumed

"""`perfscope capture` on real training loops started as separate processes (tests/live_job.py), through the CLI.

Decided on what load cannot move: step indices (the captured steps come after the step the loop had finished when
the request was made, and the loop's count keeps rising), the rule the diagnosis names (the loader's injected wait
is ~95 % of each step: the data-wait finding PS201 fires at any load), exit codes and the lines printed.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfscope.cli import main
from perfscope.live import protocol
from perfscope.results import Results, msg
from perfscope.trace.memory_categories import memory_text, read_memory
from perfscope.wording import words

JOB = Path(__file__).parent / "live_job.py"
ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.skipif(sys.platform == "win32", reason="signals and /proc"), pytest.mark.slow]


class Job:
    """A live_job.py process: its step count, its PID, and a clean stop."""

    def __init__(self, work: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.log = open(work / "log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, str(JOB), str(work), *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def steps(self) -> int:
        try:
            return int((self.work / "steps").read_text())
        except (OSError, ValueError):
            return 0

    def wait_registered(self, path: Path, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            assert self.proc.poll() is None, (self.work / "log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"{path} never appeared: {(self.work / 'log').read_text()[-3000:]}"
            time.sleep(0.1)

    def wait_steps(self, n: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self.steps() < n:
            assert self.proc.poll() is None and time.monotonic() < deadline, (self.work / "log").read_text()[-3000:]
            time.sleep(0.05)

    def stop(self) -> int:
        (self.work / "stop").touch()
        try:
            return self.proc.wait(timeout=120)
        finally:
            self.log.close()


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "registry"
    monkeypatch.setenv(protocol.ROOT_ENV, str(root))
    monkeypatch.delenv(protocol.DIR_ENV, raising=False)
    monkeypatch.delenv(protocol.SIGNAL_ENV, raising=False)
    return root


@pytest.fixture
def job(tmp_path: Path, registry: Path) -> Iterator[Job]:
    running = Job(tmp_path / "job")
    running.wait_registered(registry / f"{running.pid}.json")
    yield running
    if running.proc.poll() is None:
        assert running.stop() == 0, (running.work / "log").read_text()[-3000:]


def traced_steps(trace: Path) -> list[int]:
    with gzip.open(trace, "rt") as fh:
        names = {e["name"] for e in json.load(fh)["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(int(n.split("#")[1]) for n in names)


def capture(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    rc = main(["capture", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_running_loop_is_captured_twice_and_keeps_training(job: Job, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    previous_last = -1
    for n in (1, 2):
        asked_after = job.steps()
        rc, out, err = capture(capsys, job.pid, "--steps", "3", "--out", tmp_path / f"cap{n}")
        assert rc == 0, err
        steps = traced_steps(tmp_path / f"cap{n}" / "trace" / "rank0.json.gz")
        assert len(steps) == 3 and steps[0] > asked_after and steps[0] > previous_last  # the steps after the request
        assert steps == list(range(steps[0], steps[0] + 3))
        previous_last = steps[-1]
        results = Results.load(tmp_path / f"cap{n}" / "results.json")
        assert results.source == "trace"
        assert "PS201" in {f.rule_id for f in results.findings}  # the loader's injected wait, named
        assert any(n.code == "captured_on_demand" and (n.params["first"], n.params["last"], n.params["pid"])
                   == (steps[0], steps[-1], job.pid) for n in results.notes), results.notes
        assert "data wait" in out  # the top finding, printed (the note's words: test_a_job_that_ends_mid_capture...)
        job.wait_steps(previous_last + 5)  # it keeps training after the capture
    assert job.stop() == 0
    assert Results.load(job.work / "out" / "results.json").trials[0].ok  # the job's own results, saved at its end


def test_a_capture_with_memory_breaks_the_jobs_memory_down_by_category(job: Job, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    job.wait_steps(5)
    out = tmp_path / "mem"
    rc, _, err = capture(capsys, job.pid, "--steps", "2", "--memory", "--out", out)
    assert rc == 0, err
    memory = json.loads((out / "memory-rank0.json").read_text())
    # live_job.py's model: Linear(32, 64) and Linear(64, 16) in fp32; plain SGD keeps no state
    assert memory["max_bytes"]["parameter"] == 4 * (32 * 64 + 64 + 64 * 16 + 16)
    assert "optimizer_state" not in memory["max_bytes"]  # only the categories that held bytes
    results = Results.load(out / "results.json")
    assert msg("rank_memory", rank=0, memory=memory_text(read_memory(out / "memory-rank0.json")),
               file="memory-rank0.json") in results.notes, results.notes
    owners = results.trials[0].metrics.memory_breakdown  # the owners at the peak, as the memory rules read them
    assert owners is not None and owners.parameters == memory["at_peak"]["parameter"] and owners.optimizer_state == 0
    held = results.trials[0].metrics.memory_categories  # and the categories, which the memory rules cite
    assert held is not None and held.peak_bytes == memory["peak_bytes"] and held.peak_category == memory["peak_category"]


def test_a_pid_without_hooks_gets_one_line_saying_how(tmp_path: Path, registry: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rc, out, err = capture(capsys, plain.pid, "--out", tmp_path / "out")
    finally:
        plain.kill()
        plain.wait()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert f"process {plain.pid} runs no perfscope hooks" in err and "perfscope.Profiler(model, optimizer)" in err
    assert "Lightning" in err and plain.returncode == -9  # never signalled: SIGUSR2 would have killed it (-12)
    rc, _, err = capture(capsys, plain.pid, "--out", tmp_path / "out")
    assert rc == 2 and f"no process {plain.pid}" in err


def test_a_failed_capture_is_the_commands_error_not_the_jobs(job: Job, registry: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (registry / str(job.pid) / "captures").write_text("")  # the trace's folder cannot be made (as on a full disk)
    rc, _, err = capture(capsys, job.pid, "--steps", "2", "--out", tmp_path / "out")
    assert rc == 2 and f"process {job.pid} (rank 0) could not capture" in err
    before = job.steps()
    job.wait_steps(before + 5)  # the job went on


def test_a_job_that_ends_mid_capture_answers_with_the_steps_it_recorded(job: Job, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    threading.Timer(3.0, lambda: (job.work / "stop").touch()).start()  # its loop ends while 100000 steps are asked for
    rc, out, err = capture(capsys, job.pid, "--steps", "100000", "--out", tmp_path / "out", "--timeout", "100")
    assert rc == 0, err
    (said,) = [n for n in Results.load(tmp_path / "out" / "results.json").notes if n.code == "captured_on_demand"]
    first, last = said.params["first"], said.params["last"]
    assert said.params["pid"] == job.pid and said.params["steps"] == 100000 and last - first + 1 < 100000
    assert words(said) in out  # printed as recorded
    # the trace: those steps, and the one in progress when the loop ended (its last next(), cut short)
    assert traced_steps(tmp_path / "out" / "trace" / "rank0.json.gz") == list(range(first, last + 2))
    assert job.proc.wait(timeout=60) == 0


def test_a_job_killed_mid_capture_is_reported(job: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    threading.Timer(3.0, job.proc.kill).start()
    rc, out, err = capture(capsys, job.pid, "--steps", "100000", "--out", tmp_path / "out", "--timeout", "100")
    assert rc == 2 and out == "" and f"process {job.pid} exited before its capture finished" in err
    assert job.proc.wait(timeout=60) == -9


def test_ranks_sharing_a_control_folder_capture_the_same_steps(tmp_path: Path, registry: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    control = tmp_path / "control"
    with socket.socket() as sock:  # a free port for the two ranks' gloo group (a torchrun job's environment)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    ranks = [Job(tmp_path / f"rank{r}", "--live", str(control), env={**env, "RANK": str(r)}) for r in (0, 1)]
    try:
        for job in ranks:
            job.wait_registered(control / f"status-{protocol.member(job.pid, protocol.host())}.json")
        rc, out, err = capture(capsys, "--dir", control, "--steps", "2", "--out", tmp_path / "out")
        assert rc == 0, err
        traced = [traced_steps(tmp_path / "out" / "trace" / f"rank{r}.json.gz") for r in (0, 1)]
        assert traced[0] == traced[1] and len(traced[0]) == 2
        notes = {n.params["rank"]: n.params for n in Results.load(tmp_path / "out" / "results.json").notes
                 if n.code == "captured_on_demand"}
        assert sorted(notes) == list(range(len(ranks))) and all(
            (notes[r]["first"], notes[r]["last"], notes[r]["pid"]) == (*traced[0], job.pid) for r, job in enumerate(ranks))
        assert not list(control.glob("done-*")) and not (control / "captures" / "x").exists()
    finally:
        assert [job.stop() for job in ranks] == [0, 0]
    assert not list(control.glob("status-*"))  # each unregistered at its end


def test_perfscope_capture_imports_no_torch(job: Job, tmp_path: Path) -> None:
    from tests.test_torch_free import run_cli

    result = run_cli(tmp_path, "capture", job.pid, "--steps", "2", "--out", tmp_path / "out")
    assert result["torch"] == [] and (tmp_path / "out" / "report.html").is_file()


def test_a_killed_jobs_registration_is_pruned_by_the_next_one(tmp_path: Path, registry: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a PID that no longer runs, registered as a job killed before it could unregister would leave it
    stale = protocol.Status(pid=gone.pid, host=protocol.host(), rank=0, control=str(registry / str(gone.pid)),
                            signal="SIGUSR2", poll_s=None)
    protocol.write_json(registry / f"{gone.pid}.json", stale)
    protocol.write_json(registry / str(gone.pid) / protocol.REQUEST, protocol.new_request(3))
    running = Job(tmp_path / "job")
    try:
        running.wait_registered(registry / f"{running.pid}.json")
        assert not (registry / f"{gone.pid}.json").exists() and not (registry / str(gone.pid)).exists()
    finally:
        assert running.stop() == 0

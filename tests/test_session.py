"""The measurement session's bookkeeping, with a fake runner: names, sequence, noisy-neighbour re-runs."""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from perfscope.measure.contention import ContentionProbe, judge
from perfscope.measure.cores import CpuBudget
from perfscope.results import (
    Contention,
    Environment,
    Results,
    WorkloadInfo,
    to_jsonable,
)
from perfscope.results.config import TrialConfig
from perfscope.results.messages import legacy, msg
from perfscope.trial.runner import Outcome
from perfscope.trial.session import CONTENTION_RETRIES, PERSISTENT_AFTER, Progress, Session
from perfscope.trial.spec import ChildSpec
from tests.factories import make_trial
from tests.waiting import wait_for, wait_gone


class FakeRunner:
    """Returns one scripted run per call: a samples/s value, contended or not."""

    def __init__(self, script: list[tuple[float, bool]]) -> None:
        self.script = list(script)
        self.specs: list[ChildSpec] = []

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
        self.specs.append(spec)
        rate, contended = self.script.pop(0)
        metrics = make_trial(median_s=8 / rate, n=10, noise=0.0, batch=8).metrics
        assert metrics is not None
        reason = msg("contention", parts=[msg("other_processes_busy", cores=1.0, cpus=2, beyond_quota=0)]) if contended else None
        metrics.windows[0].contention = Contention(other_cpu_cores=1.0 if contended else 0.0, contended=contended, reason=reason)
        return Outcome(status="ok", error=None, payload={"metrics": to_jsonable(metrics)}, wall_time_s=1.0)

    def close(self) -> None:
        pass


def _session(tmp_path: Path, runner: FakeRunner) -> Session:
    results = Results(environment=Environment(device_type="cpu", device_name="cpu"), workload=WorkloadInfo(path="w.py", sha256="", name="w"))
    return Session(results, out_dir=tmp_path, workload_path=tmp_path / "w.py", timeout_s=60,
                   progress=Progress(stream=io.StringIO()), runner=runner)  # type: ignore[arg-type]


CONFIG = TrialConfig(micro_batch_size=8)


def test_runs_of_a_configuration_are_named_and_sequenced(tmp_path: Path) -> None:
    session = _session(tmp_path, FakeRunner([(100.0, False)] * 3))
    a, b, c = session.measure("baseline", CONFIG), session.measure("amp", CONFIG), session.measure("baseline", CONFIG)
    assert [t.name for t in (a, b, c)] == ["baseline", "amp", "baseline-r2"]
    assert [t.sequence for t in (a, b, c)] == [1, 2, 3] and c.repeat == 2
    assert [t.name for t in session.results.runs("baseline")] == ["baseline", "baseline-r2"]
    assert Results.load(tmp_path / "results.json").trial("baseline-r2") is not None  # saved after every run


def test_a_contended_run_is_excluded_and_measured_again(tmp_path: Path) -> None:
    session = _session(tmp_path, FakeRunner([(10.0, True), (100.0, False)]))
    trial = session.measure("baseline", CONFIG)
    first = session.results.trial("baseline")
    assert first is not None and first.excluded and first.excluded.code == "contended" and not first.evidence
    assert first.contended and first.excluded.params["why"] == first.metrics.contention
    assert trial.name == "baseline-r2" and trial.evidence
    assert session.results.warnings == []


def test_a_contended_run_is_not_measured_again_when_the_budget_would_not_allow_it(tmp_path: Path) -> None:
    session = _session(tmp_path, FakeRunner([(10.0, True), (100.0, False)]))
    session.may_retry = lambda: False  # what the sweep sets when a retry would overrun its budget
    trial = session.measure("baseline", CONFIG)
    assert [t.name for t in session.results.trials] == ["baseline"] and not trial.evidence
    assert trial.excluded == msg("contended", why=trial.metrics.contention, budget=True) and trial.contended


def test_persistent_contention_excludes_every_run_and_warns(tmp_path: Path) -> None:
    session = _session(tmp_path, FakeRunner([(10.0, True)] * (CONTENTION_RETRIES + 1)))
    trial = session.measure("baseline", CONFIG)
    runs = [t for t in session.results.trials if t.configuration == "baseline"]
    assert len(runs) == CONTENTION_RETRIES + 1 and not any(r.evidence for r in runs) and not trial.evidence
    assert session.results.runs("baseline") == []  # runs() lists evidence only
    assert trial.excluded == msg("contended", why=trial.metrics.contention, runs=CONTENTION_RETRIES + 1)
    (warning,) = session.results.warnings
    assert warning == msg("persistent_load", runs=CONTENTION_RETRIES + 1, spoiled={"baseline": 1},
                          last=warning.params["last"], gave_up_after=None)


def test_persistent_contention_is_one_warning_however_often_it_happens(tmp_path: Path) -> None:
    """A sweep on a busy machine meets persistent load dozens of times: one warning names every measurement it
    spoiled and how often, rewritten in place (it once wrote one line per time, 47 in one report)."""
    session = _session(tmp_path, FakeRunner([(10.0, True)] * 3 * (CONTENTION_RETRIES + 1)))
    session.results.warnings.append(msg("stack_failed", knobs=["a", "b"], reason="crashed", joining="b", trial="s"))
    session.measure("baseline", CONFIG)
    session.measure("amp_bf16", CONFIG)
    session.measure("baseline", CONFIG)
    earlier, warning = session.results.warnings
    assert earlier.code == "stack_failed"
    assert warning.code == "persistent_load" and warning.params["runs"] == CONTENTION_RETRIES + 1
    assert warning.params["spoiled"] == {"baseline": 2, "amp_bf16": 1}  # in the order they came


def test_after_persistent_load_spoiled_a_few_measurements_a_contended_run_is_not_measured_again(tmp_path: Path) -> None:
    """Each retry under persistent load triples the cost of a run that ends excluded anyway: after PERSISTENT_AFTER
    spoiled measurements a contended run is excluded at once, saying so, and the warning says it too."""
    measurements = PERSISTENT_AFTER + 2
    runner = FakeRunner([(10.0, True)] * (PERSISTENT_AFTER * (CONTENTION_RETRIES + 1) + 2) + [(100.0, False)])
    session = _session(tmp_path, runner)
    for _ in range(measurements):
        session.measure("baseline", CONFIG)
    assert len(runner.specs) == PERSISTENT_AFTER * (CONTENTION_RETRIES + 1) + 2 and len(runner.script) == 1
    last = session.results.trials[-1]
    assert last.excluded == msg("contended", why=last.metrics.contention, gave_up_after=PERSISTENT_AFTER)
    (warning,) = session.results.warnings
    assert warning.params["spoiled"] == {"baseline": measurements} and warning.params["gave_up_after"] == PERSISTENT_AFTER
    assert session.measure("baseline", CONFIG).evidence  # a quiet run is evidence again


def test_a_resumed_session_keeps_one_load_warning(tmp_path: Path) -> None:
    """--resume replays the kept runs and earns the load warning again: the previous one, in this wording or an
    older perfscope's (one line per measurement), does not stand beside it; other warnings stay."""
    first = _session(tmp_path, FakeRunner([(10.0, True)] * (CONTENTION_RETRIES + 1)))
    first.measure("baseline", CONFIG)
    results = Results.load(tmp_path / "results.json")
    data = results.to_dict() | {"schema_version": 2}  # as an older perfscope wrote them: prose
    data["warnings"] = ["other load on this machine persisted through 3 runs of baseline (an older wording)",
                        "an unrelated warning"]
    results = Results.from_dict(data)
    results.warnings.append(msg("persistent_load", runs=3, spoiled={"amp": 1}, last="x"))  # this wording's
    resumed = Session(results, out_dir=tmp_path, workload_path=tmp_path / "w.py", timeout_s=60, resume=True,
                      progress=Progress(stream=io.StringIO()), runner=FakeRunner([]))  # type: ignore[arg-type]
    resumed.measure("baseline", CONFIG)  # every run kept: the runner is never asked
    unrelated, warning = resumed.results.warnings
    assert unrelated == legacy("an unrelated warning")
    assert warning.code == "persistent_load" and warning.params["spoiled"] == {"baseline": 1}


def test_contention_is_judged_against_the_cores_the_run_may_use() -> None:
    two = CpuBudget(cpus=frozenset({0, 1}))
    assert judge(Contention(other_cpu_cores=1.0, own_cpu_cores=1.0), two).contended
    assert not judge(Contention(other_cpu_cores=0.01, own_cpu_cores=1.9), two).contended  # background noise
    assert judge(Contention(steal_cores=0.3), two).reason == msg("contention", parts=[msg("hypervisor_stole", cores=0.3)])
    assert judge(Contention(device_other_processes=["4242"]), two).contended


def test_the_probe_sees_a_busy_neighbour(tmp_path: Path) -> None:
    """Neighbour processes spinning on every core (orphaned, so not our descendants), while this one spins."""
    cores = os.cpu_count() or 1
    ready = tmp_path / "spinning"
    ready.mkdir()
    # Each spinner writes its pid once it spins, then spins until this test removes the folder (at most 60 s).
    code = ("import os, sys, time, pathlib\nd = pathlib.Path(sys.argv[1]); (d / str(os.getpid())).touch()\n"
            "end = time.time() + 60\nwhile d.exists() and time.time() < end: pass")
    spin = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} {shlex.quote(str(ready))}"
    subprocess.run(["sh", "-c", " ".join([f"{spin} &"] * cores)], check=True)  # the shell exits; they live on
    try:
        wait_for(lambda: len(list(ready.iterdir())) == cores, f"{cores} neighbours to spin", timeout_s=60)
        pids = [int(p.name) for p in ready.iterdir()]
        probe = ContentionProbe("cpu")
        end = time.perf_counter() + 0.8
        while time.perf_counter() < end:
            pass
        reading = probe.finish()
    finally:
        shutil.rmtree(ready)  # the neighbours' signal to stop
    assert wait_gone(pids, timeout_s=30) == []  # ended before the next test measures anything
    assert reading.other_cpu_cores is not None and reading.other_cpu_cores >= 0.5 * cores
    assert reading.contended, reading


def test_the_probe_is_quiet_on_its_own() -> None:
    probe = ContentionProbe("cpu")
    time.sleep(0.3)  # the measured thing: this process idling (no other process is waited for)
    reading = probe.finish()
    assert reading.own_cpu_cores is not None and reading.own_cpu_cores < 0.5


def test_a_dropped_runner_does_not_leave_its_zygote_behind(tmp_path: Path) -> None:
    import gc

    import psutil

    from perfscope.trial.runner import TrialRunner

    runner = TrialRunner(tmp_path)
    zygote = runner._zygote_for(tmp_path / "t")
    assert zygote is not None and zygote.alive
    pid = zygote.proc.pid
    del runner, zygote
    gc.collect()
    try:
        psutil.Process(pid).wait(timeout=10)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

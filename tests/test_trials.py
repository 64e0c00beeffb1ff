"""Each trial status, produced by real trial processes: ok, oom, error, crashed, timeout, nonfinite."""

import time
from pathlib import Path

import pytest

from perfscope.measure.mfu import choose_peak
from perfscope.results import Environment, Results, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.trial.session import Progress, Session
from tests.waiting import wait_gone

WORKLOADS = Path(__file__).parent / "workloads"
pytestmark = pytest.mark.slow


def _session(tmp_path: Path, name: str, timeout_s: float = 120) -> Session:
    results = Results(
        environment=Environment(device_type="cpu", device_name="test cpu", measured_ceiling_tflops={"fp32": 0.1}),
        workload=WorkloadInfo(path=str(WORKLOADS / name), sha256="x", name=name),
    )
    results.peak = choose_peak(results.environment)
    # No re-runs under load: these tests check statuses and bookkeeping, not the noisy-neighbour guard.
    return Session(results, out_dir=tmp_path, workload_path=WORKLOADS / name, timeout_s=timeout_s, progress=Progress(),
                   contention_retries=0)


CONFIG = TrialConfig(micro_batch_size=4, steps=4, warmup_steps=1)


@pytest.mark.parametrize(
    ("mode", "status", "message"),
    [
        ("oom", "oom", "out of memory"),
        ("error", "error", "shapes do not match"),
        ("nan", "nonfinite", "loss became nan"),
        ("segfault", "crashed", "SIGSEGV"),
        ("exit", "crashed", "exited with code 3"),
    ],
)
def test_failure_statuses(tmp_path, monkeypatch, mode, status, message):
    monkeypatch.setenv("PERFSCOPE_TEST_FAILURE", mode)
    session = _session(tmp_path, "misbehaving.py")
    trial = session.measure("t", CONFIG)
    assert trial.status == status
    assert message in (trial.error or "")
    # recorded at once, atomically
    saved = Results.load(tmp_path / "results.json")
    assert saved.trial("t").status == status


def test_ok_trial_records_full_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFSCOPE_TEST_FAILURE", raising=False)
    trial = _session(tmp_path, "mlp.py").measure("baseline", TrialConfig(micro_batch_size=8, steps=6, warmup_steps=2))
    assert trial.status == "ok"
    m = trial.metrics
    assert len(m.step_times_s) == 6 and len(m.step_data_wait_s) == 6 and len(m.losses) == 6
    assert all(t > 0 for t in m.step_times_s)
    assert m.typical_step.p10 <= m.typical_step.median <= m.typical_step.p90
    (window,) = m.windows
    assert window.steps == 6 and window.samples == 48
    assert m.samples_per_s == pytest.approx(48 / window.wall_s)  # work / wall time, never 8 / median
    assert window.wall_s == pytest.approx(sum(m.step_times_s), rel=1e-6)
    assert m.flops_per_step == 96256  # exact: see test_flops.py for the arithmetic
    assert m.mfu is not None and 0 < m.mfu
    assert m.mfu_vs_measured_ceiling == pytest.approx(m.mfu)  # CPU: the peak is the measured ceiling
    assert m.memory_breakdown.parameters == (32 * 64 + 64 + 64 * 10 + 10) * 4
    assert m.memory_breakdown.optimizer_state >= 2 * m.memory_breakdown.parameters  # AdamW: two moments


def test_timeout_kills_the_whole_process_group(tmp_path, monkeypatch):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("PERFSCOPE_TEST_FAILURE", "hang")
    monkeypatch.setenv("PERFSCOPE_TEST_WORKERS", "2")
    monkeypatch.setenv("PERFSCOPE_TEST_PID_DIR", str(pid_dir))
    start = time.monotonic()
    trial = _session(tmp_path, "misbehaving.py", timeout_s=8).measure("t", CONFIG.replace(num_workers=2))
    # The trial's own 8 s timeout ended it (the runner's message says which mechanism); the bound below is only a
    # deadline against a hang in the kill (waiting on pipes the workers hold), generous enough for a loaded machine.
    assert trial.status == "timeout" and "trial exceeded 8 s and was killed" in (trial.error or ""), trial.error
    assert time.monotonic() - start < 120
    worker_pids = [int(p.stem) for p in pid_dir.glob("*.pid")]
    assert worker_pids, "the DataLoader workers should have loaded samples"
    survivors = wait_gone(worker_pids, timeout_s=30)  # killed with the group: gone at once, waited for, not guessed
    assert survivors == [], f"DataLoader workers survived the timeout: {survivors}"


def test_resume_keeps_finished_trials(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFSCOPE_TEST_FAILURE", raising=False)
    first = _session(tmp_path, "mlp.py").measure("baseline", CONFIG.replace(micro_batch_size=8))
    results = Results.load(tmp_path / "results.json")
    session = Session(results, out_dir=tmp_path, workload_path=WORKLOADS / "mlp.py", timeout_s=120, resume=True,
                      progress=Progress(), contention_retries=0)
    again = session.measure("baseline", CONFIG.replace(micro_batch_size=8))
    assert again.metrics.wall_s == first.metrics.wall_s  # kept, not re-run (a new run never times the same to the ns)
    # the same run asked with another config is measured again
    results = Results.load(tmp_path / "results.json")
    session = Session(results, out_dir=tmp_path, workload_path=WORKLOADS / "mlp.py", timeout_s=120, resume=True,
                      progress=Progress(), contention_retries=0)
    changed = session.measure("baseline", CONFIG.replace(micro_batch_size=4))
    assert changed.config.micro_batch_size == 4 and changed.metrics.wall_s != first.metrics.wall_s


def test_a_crash_during_trace_capture_keeps_the_timed_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSCOPE_TEST_FAILURE", "segfault_in_trace")
    trial = _session(tmp_path, "misbehaving.py").measure("t", CONFIG.replace(capture_trace=True))
    assert trial.status == "ok" and trial.metrics is not None and trial.metrics.samples_per_s
    why = trial.metrics.unavailable["trace"]
    assert why.code == "trial_died_in_trace" and "SIGSEGV" in why.params["how"]

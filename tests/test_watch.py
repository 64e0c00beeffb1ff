"""The watch (perfscope.hooks.watch): a lasting step-time shift caught within a few steps, none raised without one.

The detector itself on seeded synthetic step times (what load cannot move: the same records, the same decisions),
then a real loop in a separate process (tests/live_job.py) whose loader slows down at step K: decided on step indices
and on the data-wait share the finding names (0 % of the step before K, most of it after: no wall-clock threshold).
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from perfscope.hooks.clocks import ClockReading
from perfscope.hooks.watch import Watch, WatchConfig
from perfscope.measure.window import StepRecord
from perfscope.results.messages import Message, msg
from perfscope.wording import words
from tests.public_traces import public_trace
from tests.test_live import Job, traced_steps


def feed(watch: Watch, times: list[float], waits: list[float] | None = None) -> None:
    for i, t in enumerate(times):
        watch.add(StepRecord(index=i, time_s=t, data_wait_s=(waits or [0.0] * len(times))[i], host_data_wait_s=0.0,
                             samples=8, micro_steps=1))


def noisy(n: int, seed: int, *, sigma: float = 0.05, outliers: float = 0.01) -> list[float]:
    """Log-normal step times around 10 ms, with single-step outliers (a GC pause, a logging step) of 3×."""
    rng = random.Random(seed)
    return [0.01 * rng.lognormvariate(0, sigma) * (3.0 if rng.random() < outliers else 1.0) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_no_change_raises_no_alarm_over_20000_steps(seed: int, tmp_path: Path) -> None:
    captured: list[str] = []
    watch = Watch(WatchConfig(out=str(tmp_path)), capture=lambda n, d: bool(captured.append(d.name)) or True)
    feed(watch, noisy(20_000, seed))
    # the one capture is the reference's (for new syncs), at the 30th step; it wrote no trace here, so nothing waits
    assert watch.findings == [] and captured == ["reference-step29"] and not list(tmp_path.iterdir())


@pytest.mark.parametrize("seed", range(5))
def test_a_data_wait_shift_is_caught_within_a_few_steps_and_named(seed: int, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    k, n = 500, 700
    times = noisy(n, seed)
    waits = [0.0002] * k + [0.008] * (n - k)  # 2 % of the step, then 8 ms more per step, all of it waiting for data
    times = [t + (0.008 if i >= k else 0.0) for i, t in enumerate(times)]
    notes: list[Message] = []
    watch = Watch(WatchConfig(out=str(tmp_path)), capture=lambda n, d: True, notes=notes)
    with caplog.at_level(logging.WARNING, logger="perfscope"):
        feed(watch, times, waits)
    assert len(watch.findings) == 1
    found = watch.findings[0]
    assert k <= found.began_step <= k + 1 and found.detected_step <= k + 6
    assert found.data_wait_share[0] < 0.05 and found.data_wait_share[1] > 0.3
    # the note on the run carries the changes as messages; the finding's file, their words
    (note,) = notes
    assert note.code == "watch_step_time_shifted" and note.params["detected"] == found.detected_step
    assert [c.code for c in note.params["changes"]] == ["watch_step_time", "watch_data_wait", "watch_data_wait_added"]
    wait = note.params["changes"][1].params
    assert round(wait["before"], 2) == 0.02 and 0.1 <= round(wait["after"], 2) < 1  # data wait 2% → dd% of the step
    assert [words(c) for c in note.params["changes"]] == found.changes
    assert [r.getMessage().startswith(f"perfscope {words(note)}") for r in caplog.records] == [True]
    written = json.loads((tmp_path / f"watch-step{found.detected_step}.json").read_text())
    assert written["began_step"] == found.began_step and written["capture"].endswith(f"capture-step{found.detected_step}")


def test_recompiles_are_named(tmp_path: Path) -> None:
    graphs = iter([3] + [5] * 1000)
    notes: list[Message] = []
    watch = Watch(WatchConfig(out=str(tmp_path)), capture=lambda n, d: False, graphs=lambda: next(graphs), notes=notes)
    feed(watch, [0.01] * 100 + [0.03] * 20)
    assert len(watch.findings) == 1 and msg("watch_recompiles", graphs=2) in notes[0].params["changes"]
    assert watch.findings[0].capture is None


def test_a_clock_that_fell_or_a_new_throttle_reason_is_named(tmp_path: Path) -> None:
    gpu = iter([ClockReading("GPU SM clock", 1980.0), ClockReading("GPU SM clock", 1410.0, ("HW thermal slowdown",))])
    watch = Watch(WatchConfig(out=str(tmp_path)), capture=lambda n, d: False, clocks=lambda: next(gpu))
    feed(watch, [0.01] * 100 + [0.014] * 20)
    assert "GPU SM clock 1980 → 1410 MHz (-29%); throttling: HW thermal slowdown (NVML)" in watch.findings[0].changes
    # A CPU governor's 5 % is not throttling worth naming; no reading (no cpufreq) names nothing either.
    for readings in ([ClockReading("CPU clock", 3000.0), ClockReading("CPU clock", 2850.0)], [None, None]):
        seen = iter(readings)
        watch = Watch(WatchConfig(out=str(tmp_path / "cpu")), capture=lambda n, d: False, clocks=lambda seen=seen: next(seen))
        feed(watch, [0.01] * 100 + [0.014] * 20)
        assert not any("clock" in change for change in watch.findings[0].changes)


def test_a_sync_that_the_alarms_capture_adds_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two real GPU traces (HTA's trace_diff pair) as the captures: the reference's waits mostly in
    cudaStreamSynchronize; the alarm's adds `.item()` and device-to-host `.to()` waits."""
    traces = iter([public_trace("trace_diff/control/control"), public_trace("trace_diff/test/test")])

    def capture(steps: int, folder: Path) -> bool:
        folder.mkdir(parents=True)
        (folder / "rank0.json.gz").write_bytes(next(traces).read_bytes())
        return True

    watch = Watch(WatchConfig(out=str(tmp_path)), capture=capture)
    with caplog.at_level(logging.WARNING, logger="perfscope"):
        feed(watch, [0.01] * 100 + [0.014] * 20)
        watch.settle(timeout_s=120)
    (found,) = watch.findings
    assert "a new sync: aten::item > aten::_local_scalar_dense (DtoH copy) 2.5 per step (was 0)" in found.changes
    assert not any("cudaStreamSynchronize" in change for change in found.changes)  # it waits less often: not new
    written = json.loads((tmp_path / f"watch-step{found.detected_step}.json").read_text())
    assert written["changes"] == found.changes
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["perfscope watch"] * 2


@pytest.mark.slow
def test_a_real_loop_slowed_at_step_k_is_caught_captured_and_named(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFSCOPE_LIVE_ROOT", str(tmp_path / "registry"))
    k = 60
    job = Job(tmp_path / "job", "--watch", "--wait", "0", "--compute", "0.02", "--slow-from", str(k))
    watch_dir = job.work / "watch"
    try:
        job.wait_steps(k + 40, timeout_s=300)
    finally:
        assert job.stop() == 0, (job.work / "log").read_text()[-3000:]
    (path,) = watch_dir.glob("watch-step*.json")
    found = json.loads(path.read_text())
    # dated at the step after the CUSUM last left zero: a slow step just before K (load) may date it a step early
    assert k - 2 <= found["began_step"] <= k + 1 and k <= found["detected_step"] <= k + 6
    # a few generated tensors of a 20 ms step, then 0.2 s of sleep in a ~0.22 s one: far apart at any load
    assert found["data_wait_share"][0] < 0.3 and found["data_wait_share"][1] > 0.6
    steps = traced_steps(Path(found["capture"]) / "rank0.json.gz")
    assert len(steps) == 5 and steps[0] > found["detected_step"]
    notes = json.loads((job.work / "out" / "results.json").read_text())["notes"]
    (shifted,) = [Message(n["code"], n["params"]) for n in notes if n["code"] == "watch_step_time_shifted"]
    assert shifted.params["detected"] == found["detected_step"]
    assert "watch_data_wait_added" in [c.code for c in shifted.params["changes"]]
    log = (job.work / "log").read_text()
    assert log.count(f"perfscope {words(shifted)}") == 1  # one warning, on the job's own log


def test_a_clock_reader_never_raises_where_there_is_nothing_to_read() -> None:
    import torch

    from perfscope.hooks.clocks import clock_reader

    if not torch.cuda.is_available():
        assert clock_reader(torch.device("cuda"))() is None  # no NVML device for CUDA: None, no exception
    reading = clock_reader(torch.device("cpu"))()
    assert reading is None or (reading.source == "CPU clock" and reading.mhz and reading.mhz > 0)

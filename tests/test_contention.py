"""Noisy-neighbour verdicts (perfscope.measure.contention) on fake CPU readings: judged against the CPUs the run
may use, the same for any own load, small neighbours counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.measure import contention
from perfscope.measure.contention import MIN_OTHER_CORES, ContentionProbe, judge, resolution_cores
from perfscope.measure.cores import CpuBudget
from perfscope.results.messages import msg
from perfscope.results.model import Contention

TWO_CPUS = CpuBudget(cpus=frozenset({0, 1}))


@pytest.mark.parametrize("other", [0.0, 0.03, 0.1, 0.3, 1.2])
def test_the_verdict_does_not_depend_on_the_runs_own_load(other: float) -> None:
    """A 1-thread baseline and a 2-thread candidate under the same neighbour: the same verdict."""
    one_thread = judge(Contention(other_cpu_cores=other, own_cpu_cores=1.0), TWO_CPUS, wall_s=2.0)
    two_threads = judge(Contention(other_cpu_cores=other, own_cpu_cores=2.0), TWO_CPUS, wall_s=2.0)
    assert one_thread.contended == two_threads.contended
    assert one_thread.contended == (other >= MIN_OTHER_CORES)


def test_a_small_neighbour_on_the_runs_cores_is_contention() -> None:
    """0.1 cores was ignored below the old 0.25 floor; with OpenMP threads on every core it stalls each barrier."""
    reading = judge(Contention(other_cpu_cores=0.1, own_cpu_cores=0.9), TWO_CPUS, wall_s=2.0)
    assert reading.contended and reading.reason == msg("contention", parts=[
        msg("other_processes_busy", cores=pytest.approx(0.1), cpus=2, beyond_quota=0)])
    assert reading.usable_cores == 2.0 and reading.min_other_cores == MIN_OTHER_CORES


def test_cpus_beyond_the_quota_are_spare_for_neighbours() -> None:
    """8 CPUs in the affinity mask but a 2-core quota: 6 cores' worth of neighbour takes nothing from the run."""
    quota = CpuBudget(cpus=frozenset(range(8)), quota_cores=2.0)
    assert quota.usable == 2.0 and quota.spare == 6.0
    assert not judge(Contention(other_cpu_cores=5.9), quota, wall_s=2.0).contended
    assert judge(Contention(other_cpu_cores=6.2), quota, wall_s=2.0).contended


def test_a_short_windows_threshold_is_its_tick_resolution() -> None:
    """Busy time is counted in ticks: on a 0.1 s window three ticks of rounding read as 0.3 cores."""
    floor = resolution_cores(TWO_CPUS, 0.1)
    assert floor == pytest.approx(3 * contention._TICK_S / 0.1)
    assert not judge(Contention(other_cpu_cores=floor * 0.9), TWO_CPUS, wall_s=0.1).contended
    assert judge(Contention(other_cpu_cores=floor * 1.1), TWO_CPUS, wall_s=0.1).contended


def test_busy_time_is_read_for_the_runs_cpus_only(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    tick = contention._TICK_S
    stat.write_text("cpu  900 0 90 0 0 0 0 0 0 0\n"
                    "cpu0 100 0 10 500 0 0 0 2 0 0\n"
                    "cpu1 200 5 20 500 0 1 1 3 0 0\n"
                    "cpu2 600 0 60 0 0 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    busy, steal = contention._cpu_busy(frozenset({0, 1}), stat)
    assert busy == pytest.approx((110 + 227) * tick) and steal == pytest.approx(5 * tick)
    busy_all, _ = contention._cpu_busy(None, stat)
    assert busy_all == pytest.approx((110 + 227 + 660) * tick)


class _FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_the_probe_subtracts_its_own_time_on_its_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 s window: the run's CPUs were busy 3.0 s, 2.6 s of it the run's own: the neighbour used 0.2 cores."""
    clock = _FakeClock()
    busy = iter([(10.0, 0.0), (13.0, 0.0)])
    own = iter([1.0, 3.6])
    monkeypatch.setattr(contention, "time", clock)
    monkeypatch.setattr(contention, "cpu_budget", lambda: TWO_CPUS)
    monkeypatch.setattr(contention, "_cpu_busy", lambda cpus: next(busy))
    monkeypatch.setattr(contention, "own_cpu_seconds", lambda: next(own))
    probe = ContentionProbe("cpu")
    clock.now += 2.0
    reading = probe.finish()
    assert reading.other_cpu_cores == pytest.approx(0.2) and reading.own_cpu_cores == pytest.approx(1.3)
    assert reading.contended


def test_a_distributed_jobs_probe_reads_the_whole_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's own time spans ranks on other CPUs: it is subtracted from the whole machine's busy time."""
    seen = []
    monkeypatch.setattr(contention, "_job_root", lambda: object())
    monkeypatch.setattr(contention, "cpu_budget", lambda: TWO_CPUS)
    monkeypatch.setattr(contention, "_cpu_busy", lambda cpus: seen.append(cpus) or (0.0, 0.0))
    monkeypatch.setattr(contention, "own_cpu_seconds", lambda: 0.0)
    ContentionProbe("cpu").finish()
    assert seen == [None, None]
    monkeypatch.setenv(contention.LANE_CPUS_ENV, "0,1")  # ... unless the job is on a lane: all of it on the lane's cores
    seen.clear()
    ContentionProbe("cpu").finish()
    assert seen == [TWO_CPUS.cpus, TWO_CPUS.cpus]


# ------------------------------------------------------------------------------------ a parallel sweep's own load


class _Proc:
    """What the probe reads of one of the sweep's processes (psutil.Process's pid, cpu_affinity, cpu_times)."""

    def __init__(self, pid: int, cpus: set[int], seconds: list[float], children: list[_Proc] = ()) -> None:
        self.pid, self._cpus, self._seconds, self._children = pid, cpus, iter(seconds), list(children)

    def children(self, recursive: bool = False) -> list[_Proc]:
        return self._children

    def cpu_affinity(self) -> list[int]:
        return sorted(self._cpus)

    def cpu_times(self):
        from types import SimpleNamespace

        return SimpleNamespace(user=next(self._seconds), system=0.0)


def _two_lane_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cpu0_after: str, sweep: _Proc) -> Contention:
    """Lane 0's probe (CPU 0) over a 2 s window of a 2-lane sweep, from recorded /proc/stat lines at its start and
    end: CPU 1 is lane 1's, busy all the window with its own trial."""
    before, after = tmp_path / "stat0", tmp_path / "stat1"
    before.write_text("cpu  2000 0 200 5000 0 0 0 0 0 0\ncpu0 1000 0 100 2500 0 0 0 0 0 0\n"
                      "cpu1 1000 0 100 2500 0 0 0 0 0 0\n")
    after.write_text(f"cpu  2400 0 200 5000 0 0 0 0 0 0\n{cpu0_after}\ncpu1 1200 0 100 2500 0 0 0 0 0 0\n")
    stats = iter([before, after])
    real_busy = contention._cpu_busy
    clock = _FakeClock()
    own = iter([5.0, 5.0 + 200 * contention._TICK_S * 0.9])  # the run used 0.9 of its core's busy ticks
    monkeypatch.setattr(contention, "time", clock)
    monkeypatch.setattr(contention, "cpu_budget", lambda: CpuBudget(cpus=frozenset({0})))
    monkeypatch.setattr(contention, "_cpu_busy", lambda cpus: real_busy(cpus, next(stats)))
    monkeypatch.setattr(contention, "own_cpu_seconds", lambda: next(own))
    monkeypatch.setattr(contention, "_sweep_root", lambda: sweep)
    probe = ContentionProbe("cpu")
    clock.now += 2.0
    return probe.finish()


def _sweep(driver_seconds: list[float]) -> _Proc:
    """The driver (unpinned) with lane 1's zygote and trial (pinned to CPU 1, busy 2 s of the window)."""
    lane1 = [_Proc(9001, {1}, [1.0, 1.0]), _Proc(9002, {1}, [0.0, 2.0])]
    return _Proc(9000, {0, 1}, driver_seconds, lane1)


def test_another_lanes_trial_and_the_driver_are_not_a_lanes_neighbours(monkeypatch, tmp_path) -> None:
    """CPU 0 busy 2.0 s: 1.8 s the run's own, 0.2 s the driver reading lane 1's result. Lane 1's busy trial is on
    CPU 1, which lane 0 does not read; the driver's time is the sweep's own: not contended (it was, before)."""
    reading = _two_lane_probe(monkeypatch, tmp_path, "cpu0 1200 0 100 2500 0 0 0 0 0 0", _sweep([3.0, 3.2]))
    assert reading.other_cpu_cores == pytest.approx(0.0, abs=1e-9)
    assert reading.sweep_cpu_cores == pytest.approx(0.1)  # the driver's 0.2 s; lane 1's 2 s on CPU 1 not subtracted
    assert not reading.contended


def test_a_real_neighbour_on_a_lanes_core_is_still_contention(monkeypatch, tmp_path) -> None:
    """CPU 0 busy 2.6 s: the run's 1.8 s, the driver's 0.2 s, and 0.6 s of a process outside the sweep."""
    reading = _two_lane_probe(monkeypatch, tmp_path, "cpu0 1260 0 100 2500 0 0 0 0 0 0", _sweep([3.0, 3.2]))
    assert reading.other_cpu_cores == pytest.approx(0.3)
    (part,) = reading.reason.params["parts"]
    assert reading.contended and part.code == "other_processes_busy" and part.params["cpus"] == 1


def test_the_sweeps_processes_are_read_where_they_may_run() -> None:
    """Pinned elsewhere: left out; the trial's own tree: left out (counted as its own); born in between: all of it;
    ended in between: unknown, so it stays a neighbour's."""
    tree = _Proc(1, {0, 1}, [1.0], [_Proc(2, {1}, [5.0]), _Proc(3, {0}, [0.5]), _Proc(4, {0, 1}, [9.0])])
    seconds = contention.sweep_cpu_seconds(tree, frozenset({0}), mine={4})
    assert seconds == {1: 1.0, 3: 0.5}
    assert contention.sweep_delta({1: 1.0, 3: 0.5, 7: 2.0}, {1: 1.25, 3: 0.5, 8: 0.125}) == pytest.approx(0.375)


def test_a_sweep_on_another_host_names_no_process_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Slurm or Ray node elsewhere: the driver's pid means nothing there, so nothing is subtracted."""
    import os

    monkeypatch.setenv(contention.SWEEP_ROOT_ENV, f"{os.getpid()}@not-{contention.socket.gethostname()}")
    assert contention._sweep_root() is None
    monkeypatch.setenv(contention.SWEEP_ROOT_ENV, contention.sweep_env()[contention.SWEEP_ROOT_ENV])
    assert contention._sweep_root().pid == os.getpid()


def test_a_reaped_childs_cpu_time_counts_as_the_runs_own() -> None:
    """A DataLoader worker that exits inside the window (an epoch end without persistent workers) is still the run's
    own CPU time, not another process's load (os.times() for this process: psutil's children_* are 0 on macOS)."""
    before = contention.own_cpu_seconds()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"],
                   check=True)
    assert contention.own_cpu_seconds() - before >= 0.3

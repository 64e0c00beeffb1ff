"""Noisy neighbours: how much of the machine *other* processes used while a window was measured.

Design notes: docs/measurement.md."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import psutil

from perfscope.measure.cores import LANE_CPUS_ENV, CpuBudget, cpu_budget
from perfscope.results.messages import msg
from perfscope.results.model import Contention

MIN_OTHER_CORES = 0.05
MIN_STEAL_CORES = 0.1
PROC_STAT = Path("/proc/stat")
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
JOB_ROOT_ENV = "PERFSCOPE_JOB_ROOT_PID"
"""Set by a distributed trial's ranks to their torchrun agent's pid: the job's other ranks are not neighbours."""
SWEEP_ROOT_ENV = "PERFSCOPE_SWEEP_ROOT"
"""Set on a parallel sweep's trials to its driver as 'pid@host': the sweep's own processes are not neighbours."""


def _cpu_busy(cpus: frozenset[int] | None, stat: Path = PROC_STAT) -> tuple[float, float]:
    """(busy CPU seconds, steal seconds) since boot of ``cpus`` (all CPUs when None), from /proc/stat's per-CPU
    lines; the whole machine from psutil where /proc/stat cannot be read (not Linux)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        lines = []
    busy = steal = 0.0
    found = False
    for line in lines:
        if not line.strip():
            continue
        name, *fields = line.split()
        if not name.startswith("cpu") or not name[3:].isdigit() or (cpus is not None and int(name[3:]) not in cpus):
            continue
        v = [float(f) for f in fields] + [0.0] * 8
        # user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
        busy += (v[0] + v[1] + v[2] + v[5] + v[6]) * _TICK_S
        steal += v[7] * _TICK_S
        found = True
    if found:
        return busy, steal
    t = psutil.cpu_times()
    busy = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


def resolution_cores(budget: CpuBudget, wall_s: float) -> float:
    """The smallest average load a window of ``wall_s`` can tell from zero: busy time is counted in clock ticks,
    each CPU's counter and this process's own time rounding by up to a tick."""
    return (budget.schedulable + 1) * _TICK_S / max(wall_s, 1e-9)


def _process(pid: str) -> psutil.Process | None:
    try:
        return psutil.Process(int(pid)) if pid else None
    except (ValueError, psutil.Error):
        return None


def _family(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its live descendants (``root`` alone when they cannot be listed)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return [root]


def _job_root() -> psutil.Process | None:
    return _process(os.environ.get(JOB_ROOT_ENV, ""))


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its live descendants (DataLoader workers), each with its reaped children's; in
    a distributed trial, of the whole job (the agent and every rank with their descendants)."""
    return _tree_cpu_seconds(_own_root())


def _own_root() -> psutil.Process:
    """This process, or in a distributed trial its whole job's root: whose CPU time is the run's own."""
    return _job_root() or psutil.Process()


def _tree_cpu_seconds(root: psutil.Process) -> float:
    """CPU seconds of ``root`` and its live descendants, each with its own reaped children's time."""
    total = 0.0
    for proc in _family(root):
        try:  # this process by os.times(): psutil's children_* are always 0 on macOS, os.times() counts them there
            ct = os.times() if proc.pid == os.getpid() else proc.cpu_times()
            total += ct.user + ct.system + ct.children_user + ct.children_system
        except psutil.Error:
            pass
    return total


def sweep_env() -> dict[str, str]:
    """What a parallel sweep's driver gives its trials: itself, as the root of the sweep's processes."""
    return {SWEEP_ROOT_ENV: f"{os.getpid()}@{socket.gethostname()}"}


def _sweep_root() -> psutil.Process | None:
    """The sweep's driver when this trial runs on its host (a Slurm or Ray node elsewhere has other pids)."""
    pid, _, host = os.environ.get(SWEEP_ROOT_ENV, "").partition("@")
    return _process(pid) if host == socket.gethostname() else None


def sweep_cpu_seconds(root: psutil.Process, cpus: frozenset[int] | None, mine: set[int]) -> dict[int, float]:
    """CPU seconds so far of each of the sweep's processes (``root`` and its descendants, ``mine`` left out: this
    trial's own) that may run on ``cpus``: one pinned to other cores (another lane's) cannot have used them."""
    seconds: dict[int, float] = {}
    for proc in _family(root):
        if proc.pid in mine:
            continue
        try:
            if cpus is not None and not cpus & set(proc.cpu_affinity()):
                continue
            ct = proc.cpu_times()
            seconds[proc.pid] = ct.user + ct.system
        except psutil.Error:  # ended between listing and reading
            pass
    return seconds


def sweep_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the sweep's processes used between two readings: each one's growth (all of it for one born in
    between). One that ended in between is not known and stays counted as a neighbour: never an under-count."""
    return sum(max(t - before.get(pid, 0.0), 0.0) for pid, t in after.items())


def judge(reading: Contention, budget: CpuBudget, *, wall_s: float | None = None) -> Contention:
    """Fill ``contended`` and ``reason`` (docs/measurement.md): the same neighbour gives the same verdict
    whatever the run's own load."""
    other, steal = reading.other_cpu_cores or 0.0, reading.steal_cores or 0.0
    floor = max(MIN_OTHER_CORES, resolution_cores(budget, wall_s) if wall_s is not None else 0.0)
    reading.usable_cores = budget.usable
    reading.min_other_cores = budget.spare + floor
    reasons = []
    if other >= reading.min_other_cores:
        reasons.append(msg("other_processes_busy", cores=other, cpus=budget.schedulable, beyond_quota=budget.spare))
    if steal >= MIN_STEAL_CORES:
        reasons.append(msg("hypervisor_stole", cores=steal))
    if reading.device_other_processes:
        reasons.append(msg("gpu_neighbours", count=len(reading.device_other_processes)))
    reading.contended = bool(reasons)
    reading.reason = msg("contention", parts=reasons) if reasons else None
    return reading


class ContentionProbe:
    def __init__(self, device_type: str = "cpu", *, nvml_handle: object | None = None) -> None:
        self.device_type = device_type
        self._nvml_handle = nvml_handle
        self._budget = cpu_budget()
        # A distributed job's own time spans every rank, whose CPUs may differ (NUMA binding): the whole machine's
        # busy time is then the one it can be subtracted from (a neighbour anywhere counts: conservative).
        # On a lane (perfscope.lanes) the whole job is pinned to the lane's cores: those are the ones to read.
        self._cpus = None if _job_root() is not None and not os.environ.get(LANE_CPUS_ENV) else self._budget.cpus
        self._wall0 = time.perf_counter()
        self._sweep = _sweep_root()
        self._sweep0 = self._sweep_seconds()
        self._busy0, self._steal0 = _cpu_busy(self._cpus)
        self._own0 = own_cpu_seconds()

    def finish(self) -> Contention:
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        busy, steal = _cpu_busy(self._cpus)
        own = own_cpu_seconds() - self._own0
        sweep = sweep_delta(self._sweep0, self._sweep_seconds())
        other = max((busy - self._busy0) - own - sweep, 0.0) / wall
        return judge(Contention(other_cpu_cores=other, own_cpu_cores=own / wall, steal_cores=(steal - self._steal0) / wall,
                                sweep_cpu_cores=sweep / wall if self._sweep is not None else None,
                                device_other_processes=self._device_others()), self._budget, wall_s=wall)

    def _sweep_seconds(self) -> dict[int, float]:
        if self._sweep is None:
            return {}
        return sweep_cpu_seconds(self._sweep, self._cpus, {p.pid for p in _family(_own_root())})

    def _device_others(self) -> list[str]:
        if self._nvml_handle is None:
            return []
        try:
            import pynvml

            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(self._nvml_handle)
        except Exception:  # noqa: BLE001 - NVML absent or unsupported (MIG, containers): nothing to report
            return []
        mine = {os.getpid(), *(p.pid for p in _family(_own_root()))}
        # In a container NVML may list host PIDs, ours among them: only processes visible here are counted.
        return [str(p.pid) for p in procs if p.pid not in mine and psutil.pid_exists(p.pid)]

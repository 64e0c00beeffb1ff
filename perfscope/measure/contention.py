"""Noisy neighbours: how much of the machine *other* processes used while a window was measured.

    probe = ContentionProbe(device)       # at the window's start
    ...timed steps...
    reading = probe.finish()              # Contention(other_cpu_cores=1.4, steal_cores=0.0, ...)
    reading.contended, reading.reason

A window measured while another job used the cores (or the hypervisor stole them, or another process
ran kernels on the same GPU) measures the neighbour as much as the workload: on a 2-core CI runner a
busy neighbour once turned into a "53× faster" recommendation. perfscope therefore records, per window,
the CPU time the rest of the machine used (system busy time from psutil minus this process and its
children — DataLoader workers included, alive or already reaped; in a distributed trial the whole job, its
agent and sibling ranks included, named by `JOB_ROOT_ENV`) and, on a GPU, the other processes NVML sees on the
device. Contended windows are re-measured by the sweep and named in the report and the gate.

A window is contended when other processes used at least `MIN_OTHER_CORES` cores on average *and* the
machine was close to saturated (this process plus the others ≥ `SATURATION` of the logical cores): on a
64-core host a neighbour on three idle cores does not slow a loop that uses two. Hypervisor steal of at
least `MIN_STEAL_CORES` and any other compute process on the device are contention on their own.
"""

from __future__ import annotations

import os
import time

import psutil

from perfscope.results.model import Contention

MIN_OTHER_CORES = 0.25
SATURATION = 0.8
MIN_STEAL_CORES = 0.1
JOB_ROOT_ENV = "PERFSCOPE_JOB_ROOT_PID"
"""Set by a distributed trial's ranks to their torchrun agent's pid: the job's other ranks are not neighbours."""


def _system_busy() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, steal seconds) since boot."""
    t = psutil.cpu_times()
    busy = t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


def _job_root() -> psutil.Process | None:
    pid = os.environ.get(JOB_ROOT_ENV)
    if not pid:
        return None
    try:
        return psutil.Process(int(pid))
    except (ValueError, psutil.Error):
        return None


def own_cpu_seconds() -> float:
    """CPU seconds of this process, its reaped children, and its live descendants (DataLoader workers); in a
    distributed trial, of the whole job (the agent and every rank with their descendants)."""
    root = _job_root()
    if root is not None:
        return _tree_cpu_seconds(root)
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        try:
            ct = child.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:  # exited between listing and reading: its time lands in children_* once reaped
            pass
    return total


def _tree_cpu_seconds(root: psutil.Process) -> float:
    """CPU seconds of ``root`` and its live descendants, each with its own reaped children's time."""
    total = 0.0
    try:
        family = [root, *root.children(recursive=True)]
    except psutil.Error:
        family = [root]
    for proc in family:
        try:
            ct = proc.cpu_times()
            total += ct.user + ct.system + ct.children_user + ct.children_system
        except psutil.Error:
            pass
    return total


def judge(reading: Contention, *, cores: int) -> Contention:
    """Fill ``contended`` and ``reason`` from the averages (see the module docstring for the thresholds)."""
    other, own, steal = reading.other_cpu_cores or 0.0, reading.own_cpu_cores or 0.0, reading.steal_cores or 0.0
    reasons = []
    if other >= MIN_OTHER_CORES and own + other >= SATURATION * cores:
        reasons.append(f"other processes used {other:.2f} of {cores} CPU cores")
    if steal >= MIN_STEAL_CORES:
        reasons.append(f"the hypervisor stole {steal:.2f} cores")
    if reading.device_other_processes:
        reasons.append(f"{len(reading.device_other_processes)} other process(es) on the GPU")
    reading.contended = bool(reasons)
    reading.reason = "; ".join(reasons) or None
    return reading


class ContentionProbe:
    def __init__(self, device_type: str = "cpu", *, nvml_handle: object | None = None) -> None:
        self.device_type = device_type
        self._nvml_handle = nvml_handle
        self._cores = psutil.cpu_count(logical=True) or 1
        self._wall0 = time.perf_counter()
        self._busy0, self._steal0 = _system_busy()
        self._own0 = own_cpu_seconds()

    def finish(self) -> Contention:
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        busy, steal = _system_busy()
        own = own_cpu_seconds() - self._own0
        other = max((busy - self._busy0) - own, 0.0) / wall
        return judge(Contention(other_cpu_cores=other, own_cpu_cores=own / wall, steal_cores=(steal - self._steal0) / wall,
                                device_other_processes=self._device_others()), cores=self._cores)

    def _device_others(self) -> list[str]:
        if self._nvml_handle is None:
            return []
        try:
            import pynvml

            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(self._nvml_handle)
        except Exception:  # noqa: BLE001 - NVML absent or unsupported (MIG, containers): nothing to report
            return []
        root = _job_root() or psutil.Process()
        mine = {os.getpid(), root.pid, *(c.pid for c in root.children(recursive=True))}
        # In a container NVML may list host PIDs, ours among them: only processes visible here are counted.
        return [str(p.pid) for p in procs if p.pid not in mine and psutil.pid_exists(p.pid)]

"""How many CPU cores this process may really use: the affinity mask, capped by the cgroup CPU quota.

Design notes: docs/measurement.md."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from perfscope.measure.lazy_msg import msg  # a lane's trial imports this module first (perfscope.trial.pin)

if TYPE_CHECKING:
    from perfscope.results.messages import Message

LANE_CPUS_ENV = "PERFSCOPE_LANE_CPUS"
"""The cores of a parallel sweep's lane, set on its trials (applied by perfscope.trial.pin; read by the
contention guard, perfscope.measure.contention)."""


def cgroup_quota_cores(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup CPU quota in cores (v2 `cpu.max`, else v1 `cpu.cfs_quota_us`); None when unlimited or unreadable."""
    try:
        text = (root / "cpu.max").read_text().split()
        if len(text) == 2 and text[0] != "max":
            return int(text[0]) / int(text[1])
        if text:
            return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs this process may be scheduled on and the cgroup quota over them: what a neighbour competes for."""

    cpus: frozenset[int] | None
    """The affinity mask's CPU ids; None where it cannot be read (every CPU of the machine then)."""
    quota_cores: float | None = None
    logical_cpus: int = 1
    """The machine's logical CPUs (used when the affinity mask is unknown)."""

    @property
    def schedulable(self) -> int:
        """CPUs the run's threads may land on."""
        return len(self.cpus) if self.cpus is not None else self.logical_cpus

    @property
    def usable(self) -> float:
        """Cores' worth of CPU time the run may use: the affinity CPUs, capped by the quota."""
        return min(float(self.schedulable), self.quota_cores) if self.quota_cores is not None else float(self.schedulable)

    @property
    def spare(self) -> float:
        """CPU time on the run's CPUs that its quota forbids it anyway: a neighbour may use this much for free."""
        return max(self.schedulable - self.usable, 0.0)


def cpu_budget(cgroup_root: Path = Path("/sys/fs/cgroup")) -> CpuBudget:
    """This process's affinity CPUs and cgroup quota (see `CpuBudget`)."""
    try:
        cpus: frozenset[int] | None = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = None
    return CpuBudget(cpus=cpus, quota_cores=cgroup_quota_cores(cgroup_root), logical_cpus=psutil.cpu_count(logical=True) or 1)


def usable_cores() -> tuple[float | None, str]:
    """Cores this process may use: min(physical cores, affinity CPUs, cgroup quota), and how it was found."""
    budget = cpu_budget()
    physical = psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True)
    affinity = len(budget.cpus) if budget.cpus is not None else None  # None: macOS / Windows have no mask to read
    limits = [float(n) for n in (physical, affinity, budget.quota_cores) if n]
    how = [f"{physical} physical cores" if physical else "core count unknown",
           f"affinity {affinity} CPUs" if affinity is not None else "affinity not readable",
           f"cgroup quota {budget.quota_cores:g} cores" if budget.quota_cores is not None else "no cgroup quota"]
    return (min(limits) if limits else None), "; ".join(how)


def numa_nodes(root: Path = Path("/sys/devices/system/node"), system: str = sys.platform) -> tuple[int | None, Message | None]:
    """(NUMA nodes with CPUs, None), or (None, why): above 1, a rank on the far node from its GPU pays the
    cross-socket link on every host-side copy. Linux lists one ``nodeN`` directory per online node; nodes
    without CPUs (a GH200's GPU memory, CXL memory) are not counted: no rank can be bound to them."""
    if not system.startswith("linux"):
        return None, msg("numa_not_linux", system=system)
    try:
        nodes = [p for p in root.iterdir() if re.fullmatch(r"node\d+", p.name)]
        with_cpus = [p for p in nodes if (p / "cpulist").read_text().strip()]
    except OSError as exc:
        return None, msg("unreadable", path=str(root), error=str(exc.strerror or exc))
    if not with_cpus:
        return None, msg("numa_no_cpus", path=str(root))
    return len(with_cpus), None


def numa_node_count() -> int | None:
    return numa_nodes()[0]

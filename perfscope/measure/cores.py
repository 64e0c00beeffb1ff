"""How many CPU cores this process may really use: the affinity mask, capped by the cgroup CPU quota.

    cores, how = usable_cores()      # (2.0, "2 physical cores; affinity 2 CPUs; no cgroup quota")

Why not `os.cpu_count()`: a container or a `taskset` sees the whole host's CPUs but may run on a few of them,
and a Kubernetes pod's `cpu: 2` limit is a cgroup quota that lets 2 cores' worth of time through however many
CPUs are listed. Advice that depends on spare cores (DataLoader workers) must be bounded by what is left,
not by the host's size.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil


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


def usable_cores() -> tuple[float | None, str]:
    """Cores this process may use: min(physical cores, affinity CPUs, cgroup quota), and how it was found."""
    physical = psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True)
    limits: list[float] = [float(physical)] if physical else []
    how = [f"{physical} physical cores" if physical else "core count unknown"]
    try:
        affinity = len(os.sched_getaffinity(0))
        limits.append(float(affinity))
        how.append(f"affinity {affinity} CPUs")
    except (AttributeError, OSError):  # macOS / Windows: no affinity mask to read
        how.append("affinity not readable")
    quota = cgroup_quota_cores()
    if quota is not None:
        limits.append(quota)
        how.append(f"cgroup quota {quota:g} cores")
    else:
        how.append("no cgroup quota")
    return (min(limits) if limits else None), "; ".join(how)


def numa_node_count(root: Path = Path("/sys/devices/system/node")) -> int | None:
    """NUMA nodes of this machine (Linux sysfs); None where it cannot be read. Above 1, a rank on the far node
    from its GPU (or its memory) pays the cross-socket link on every host-side copy."""
    try:
        nodes = [p for p in root.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()]
    except OSError:
        return None
    return len(nodes) or None

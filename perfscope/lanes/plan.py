"""Split the machine into lanes: one device each (when there are devices) and a disjoint set of CPU cores.

Design notes: docs/parallel.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from perfscope.errors import UserError
from perfscope.measure.contention import sweep_env
from perfscope.trial.pin import LANE_CPUS_ENV, parse_cpus

NODE_DIR = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class Lane:
    """A device (a CUDA_VISIBLE_DEVICES value; None on CPU) and the cores its trials are pinned to."""

    index: int
    cpus: frozenset[int] = field(default_factory=frozenset)
    device: str | None = None

    def env(self) -> dict[str, str]:
        """What a trial on this lane is started with (perfscope.trial.pin applies the cores)."""
        env = sweep_env()  # the sweep's own processes are not a neighbour of its runs (perfscope.measure.contention)
        if self.cpus:
            env[LANE_CPUS_ENV] = ",".join(str(c) for c in sorted(self.cpus))
        if self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.device
        return env

    def describe(self) -> str:
        cores = f"cores {','.join(str(c) for c in sorted(self.cpus))}" if self.cpus else "cores not pinned"
        gpus = f"GPU{'s' if ',' in self.device else ''} {self.device}, " if self.device is not None else ""
        return f"lane {self.index}: {gpus}{cores}"


def numa_nodes(node_dir: Path = NODE_DIR) -> list[frozenset[int]]:
    """Each NUMA node's CPUs from sysfs (empty when the machine does not say)."""
    nodes = []
    for path in sorted(node_dir.glob("node[0-9]*/cpulist"), key=lambda p: int(p.parent.name[4:])):
        try:
            nodes.append(parse_cpus(path.read_text().strip()))
        except (OSError, ValueError):
            return []
    return nodes


def plan_lanes(count: int | None = None, devices: list[str] | None = None, *, cpus: frozenset[int] | None = None,
               nodes: list[frozenset[int]] | None = None, ranks: int = 1) -> list[Lane]:
    """``count`` lanes (or one per ``ranks`` devices), each with an equal share of ``cpus`` (this process's affinity).
    ``ranks``: a torchrun trial's processes on this node; its lane takes that many devices as a group, in the order
    given (list the devices that share a switch or an NVLink island together), and its ranks share the lane's cores."""
    if devices:
        if len(devices) % ranks:
            raise UserError(f"--devices {','.join(devices)}: {len(devices)} devices do not divide into groups of "
                            f"{ranks} (a {ranks}-rank torchrun trial takes its devices as a group)")
        groups_of = [",".join(devices[i:i + ranks]) for i in range(0, len(devices), ranks)]
        if count is not None and count != len(groups_of):
            raise UserError(f"--lanes {count} and --devices {','.join(devices)} disagree: give one of them")
        devices, count = groups_of, len(groups_of)
    if count is None or count < 1:
        raise UserError(f"--lanes must be at least 1, got {count}")
    available = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if count > len(available):
        raise UserError(f"{count} lanes need at least {count} CPU cores, and this process may use {len(available)}: "
                        "each lane owns its cores")
    nodes = numa_nodes() if nodes is None else nodes
    groups = [sorted(set(n) & set(available)) for n in nodes]
    groups = [g for g in groups if g]
    if len(groups) < 2 or count % len(groups) or any(len(g) < count // len(groups) for g in groups):
        groups = [available]  # one node, or lanes that cannot divide the nodes evenly: one pool of cores
    lanes: list[Lane] = []
    per_group = count // len(groups)
    for group in groups:
        share = len(group) // per_group
        for j in range(per_group):
            index = len(lanes)
            device = devices[index] if devices else None
            lanes.append(Lane(index, frozenset(group[j * share:(j + 1) * share]), device))
    return lanes

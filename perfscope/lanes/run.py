"""`perfscope analyze --lanes N | --devices 0,1 [--executor local|ray|slurm ...]`: the options, and the parallel
sweep's set-up and tear-down around the sweep.

Design notes: docs/parallel.md."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.errors import UserError
from perfscope.lanes.executors import EXECUTORS, Executor, LocalExecutor
from perfscope.lanes.plan import plan_lanes
from perfscope.lanes.sweep import lane_sweeper


@dataclass(kw_only=True)
class LaneOptions:
    lanes: int | None = None
    """Lanes on this machine (each with an equal share of the cores); None with ``devices``."""
    devices: list[str] | None = None
    """One lane per device (CUDA_VISIBLE_DEVICES values)."""
    executor: str = "local"
    slurm_partition: str | None = None
    slurm_gpus_per_node: int | None = None
    ranks: int = 1
    """Processes of a torchrun trial on this node (--nproc-per-node): each lane takes that many devices as a group."""

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise UserError(f"unknown executor {self.executor!r}; choose one of {', '.join(EXECUTORS)}")
        if self.lanes is None and not self.devices:
            raise UserError("a parallel sweep needs --lanes N or --devices LIST")
        if self.executor != "slurm" and (self.slurm_partition or self.slurm_gpus_per_node):
            raise UserError("--slurm-partition and --slurm-gpus-per-node go with --executor slurm")
        if self.ranks > 1 and self.executor != "local":
            raise UserError(f"torchrun trials ({self.ranks} ranks) run on lanes through the local executor only: the "
                            f"{self.executor} executor runs a lane's trial as one process")

    @property
    def count(self) -> int:
        """How many lanes these options ask for (what the plan's time estimate divides among)."""
        return len(self.devices) // self.ranks if self.devices else self.lanes or 1


@contextmanager
def parallel_sweep(options: LaneOptions | None, work_dir: Path, *, timeout_s: float) -> Iterator[Callable[..., Any] | None]:
    """The Sweeper factory for these lanes (None: the sequential sweep); the executor is closed afterwards."""
    if options is None:
        yield None
        return
    lanes = plan_lanes(options.lanes, options.devices, ranks=options.ranks)
    executor = make_executor(options.executor, work_dir, partition=options.slurm_partition,
                             gpus_per_node=options.slurm_gpus_per_node, timeout_s=timeout_s)
    group = ""
    if options.ranks > 1:
        group = f"; each trial is a {options.ranks}-rank torchrun job on its lane's devices and cores, which no other trial uses"
        if options.devices:
            group += "; the lanes share this node's links (PCIe, NVLink switches): each comparison stays within a lane"
    print(f"perfscope: parallel sweep on {len(lanes)} lane(s) through the {executor.name} executor: "
          + "; ".join(lane.describe() for lane in lanes) + group, file=sys.stderr, flush=True)
    try:
        runners = [executor.runner(lane) for lane in lanes]
        yield lane_sweeper(runners, executor.name, executor.cancel)
    finally:
        executor.close()


def make_executor(name: str, work_dir: Path, *, partition: str | None = None, gpus_per_node: int | None = None,
                  timeout_s: float = 600.0) -> Executor:
    """The executor ``name`` (local | ray | slurm); ray and slurm need their extra installed."""
    if name == "local":
        return LocalExecutor(work_dir)
    if name == "ray":
        from perfscope.lanes.ray import RayExecutor

        return RayExecutor(work_dir)
    if name == "slurm":
        from perfscope.lanes.slurm import SlurmExecutor

        return SlurmExecutor(work_dir, partition=partition, gpus_per_node=gpus_per_node, timeout_s=timeout_s)
    raise UserError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")

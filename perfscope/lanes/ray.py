"""The Ray executor (`--executor ray`, extra `perfscope[ray]`): each lane is a placement group, each trial a Ray task
in it that runs the trial child as a fresh process.

Design notes: docs/parallel.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perfscope.errors import UserError
from perfscope.lanes.executors import JobExecutor, JobRunner, LaneFailure, extra, first_line, run_trial_job
from perfscope.lanes.plan import Lane


def _ray() -> Any:
    return extra("ray", "ray", "Ray")


START_TRIES = 3
"""Starts of a local Ray before giving up: Ray waits a fixed 30 s for its raylet to register, which a loaded machine
can outlast (seen on the shared 2-core test machine); a cluster given by RAY_ADDRESS is connected to once."""


def _init(ray: Any, address: str | None, num_cpus: int) -> None:
    for attempt in range(1 if address else START_TRIES):
        try:
            ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False, log_to_driver=False)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node does not come up
            ray.shutdown()
            if attempt + 1 >= (1 if address else START_TRIES):
                raise UserError(f"Ray did not start: {first_line(exc)}") from None


class RayExecutor(JobExecutor):
    name = "ray"

    def __init__(self, work_dir: Path) -> None:
        super().__init__()
        ray = _ray()
        self.work_dir = work_dir
        self.started = not ray.is_initialized()
        if self.started:
            _init(ray, os.environ.get("RAY_ADDRESS"), len(os.sched_getaffinity(0)))
        here = ray.util.get_node_ip_address()
        self.local = all(n.get("NodeManagerAddress") == here for n in ray.nodes() if n.get("Alive"))
        """Every node of the cluster is this machine: the lanes' core numbers mean something where the tasks run."""
        self.task = ray.remote(run_trial_job)
        self.groups: dict[int, Any] = {}

    def runner(self, lane: Lane) -> JobRunner:
        ray = _ray()
        from ray.util.placement_group import placement_group

        bundle = {"CPU": max(1, len(lane.cpus))} | ({"GPU": 1} if lane.device is not None else {})
        group = placement_group([bundle], strategy="STRICT_PACK", name=f"perfscope-lane{lane.index}")
        try:
            ray.get(group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError:
            raise UserError(f"Ray could not reserve lane {lane.index}'s resources {bundle} in 120 s: fewer lanes, "
                            "or a cluster with room for them") from None
        self.groups[lane.index] = group
        # Pinning names this machine's cores: only right where the tasks run here (a cluster started by this process).
        return JobRunner(self, lane if self.local else Lane(lane.index, frozenset(), lane.device))

    def job(self, lane: Lane, spec_path: str, log_path: str, env: dict[str, str], timeout_s: float) -> int | None:
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        lane_env = lane.env()
        lane_env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray assigns the bundle's GPU itself
        task = self.task.options(
            num_cpus=max(1, len(lane.cpus)), num_gpus=1 if lane.device is not None else 0, max_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=self.groups[lane.index]))
        ref = task.remote(spec_path, log_path, {**env, **lane_env}, timeout_s)
        self.track(ref, True)
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise LaneFailure(f"ray task on lane {lane.index}: {first_line(exc)}") from None
        finally:
            self.track(ref, False)

    def cancel(self) -> str:
        ray = _ray()
        refs = self.in_flight()
        for ref in refs:
            ray.cancel(ref)  # not force: the task is interrupted and kills its trial's process group on the way out
        return f"{len(refs)} Ray task(s) cancelled (ray.cancel)"

    def close(self) -> None:
        ray = _ray()
        from ray.util.placement_group import remove_placement_group

        for group in self.groups.values():
            remove_placement_group(group)
        if self.started:
            ray.shutdown()

"""The Ray executor (`--executor ray`, extra `perfscope[ray]`): each lane is a placement group, each trial a Ray task
in it that runs the trial child as a fresh process.

Design notes: docs/parallel.md."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from perfscope.errors import UserError
from perfscope.lanes.executors import LaneFailure, extra, first_line, read_back, run_trial_job
from perfscope.lanes.plan import Lane
from perfscope.trial.runner import Outcome, prepare_trial
from perfscope.trial.spec import ChildSpec


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


class RayRunner:
    def __init__(self, executor: RayExecutor, lane: Lane, group: Any) -> None:
        self.executor, self.lane, self.group, self.index = executor, lane, group, lane.index

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
        ray = _ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        spec_path, _, log_path = prepare_trial(spec, work_dir)
        lane_env = self.lane.env()
        lane_env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray assigns the bundle's GPU itself
        task = self.executor.task.options(
            num_cpus=max(1, len(self.lane.cpus)), num_gpus=1 if self.lane.device is not None else 0, max_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=self.group))
        start = time.perf_counter()
        ref = task.remote(str(spec_path), str(log_path), {**(env or {}), **lane_env}, timeout_s)
        self.executor.track(ref, True)
        try:
            returncode = ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise LaneFailure(f"ray task on lane {self.index}: {first_line(exc)}") from None
        finally:
            self.executor.track(ref, False)
        return read_back(returncode, spec_path, timeout_s, time.perf_counter() - start)


class RayExecutor:
    name = "ray"

    def __init__(self, work_dir: Path) -> None:
        ray = _ray()
        self.work_dir = work_dir
        self.started = not ray.is_initialized()
        if self.started:
            _init(ray, os.environ.get("RAY_ADDRESS"), len(os.sched_getaffinity(0)))
        here = ray.util.get_node_ip_address()
        self.local = all(n.get("NodeManagerAddress") == here for n in ray.nodes() if n.get("Alive"))
        """Every node of the cluster is this machine: the lanes' core numbers mean something where the tasks run."""
        self.task = ray.remote(run_trial_job)
        self.groups: list[Any] = []
        self._refs: set[Any] = set()
        self._lock = threading.Lock()

    def runner(self, lane: Lane) -> RayRunner:
        ray = _ray()
        from ray.util.placement_group import placement_group

        bundle = {"CPU": max(1, len(lane.cpus))} | ({"GPU": 1} if lane.device is not None else {})
        group = placement_group([bundle], strategy="STRICT_PACK", name=f"perfscope-lane{lane.index}")
        try:
            ray.get(group.ready(), timeout=120)
        except ray.exceptions.GetTimeoutError:
            raise UserError(f"Ray could not reserve lane {lane.index}'s resources {bundle} in 120 s: fewer lanes, "
                            "or a cluster with room for them") from None
        self.groups.append(group)
        # Pinning names this machine's cores: only right where the tasks run here (a cluster started by this process).
        return RayRunner(self, lane if self.local else Lane(lane.index, frozenset(), lane.device), group)

    def track(self, ref: Any, running: bool) -> None:
        with self._lock:
            (self._refs.add if running else self._refs.discard)(ref)

    def cancel(self) -> str:
        ray = _ray()
        with self._lock:
            refs = list(self._refs)
        for ref in refs:
            ray.cancel(ref)  # not force: the task is interrupted and kills its trial's process group on the way out
        return f"{len(refs)} Ray task(s) cancelled (ray.cancel)"

    def close(self) -> None:
        ray = _ray()
        from ray.util.placement_group import remove_placement_group

        for group in self.groups:
            remove_placement_group(group)
        if self.started:
            ray.shutdown()

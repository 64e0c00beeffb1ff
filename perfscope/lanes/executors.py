"""Where a lane's trials run: local subprocesses, or an engine the user already runs (Ray, Slurm through submitit).

Design notes: docs/parallel.md."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from perfscope.lanes.plan import Lane
from perfscope.trial.runner import Outcome, TrialRunner
from perfscope.trial.session import LaneRunner
from perfscope.trial.spec import ChildSpec

EXECUTORS = ("local", "ray", "slurm")


class LaneFailure(Exception):
    """The executor lost a lane's job: the engine's reason (node failure, pre-emption, cancellation, a dead worker)."""


class Executor(Protocol):
    name: str

    def runner(self, lane: Lane) -> LaneRunner: ...

    def cancel(self) -> str:
        """End every trial in flight (from the driver's thread, while lanes block on them); what was cancelled."""
        ...

    def close(self) -> None: ...


class LocalRunner(TrialRunner):
    """A TrialRunner for one lane: its own zygote, the lane's cores and device in every trial's environment."""

    def __init__(self, lane: Lane, work_dir: Path) -> None:
        super().__init__(work_dir / f"_lane{lane.index}", cpus=lane.cpus or None)
        self.lane = lane
        self.index = lane.index

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
        return super().run(spec, work_dir, timeout_s=timeout_s, env={**(env or {}), **self.lane.env()})


class LocalExecutor:
    """One subprocess at a time per lane on this machine, pinned to the lane's cores (perfscope.trial.pin)."""

    name = "local"

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self._runners: list[LocalRunner] = []
        self._lock = threading.Lock()

    def runner(self, lane: Lane) -> LocalRunner:
        runner = LocalRunner(lane, self.work_dir)
        with self._lock:
            self._runners.append(runner)
        return runner

    def cancel(self) -> str:
        killed = sum(r.kill_running() for r in self._runners)
        return f"{killed} trial process(es) killed"

    def close(self) -> None:
        for runner in self._runners:
            runner.close()

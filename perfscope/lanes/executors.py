"""Where a lane's trials run: local subprocesses, or an engine the user already runs (Ray, Slurm through submitit).

Design notes: docs/parallel.md."""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from perfscope.errors import UserError
from perfscope.lanes.plan import Lane
from perfscope.trial.runner import Outcome, TrialRunner, prepare_trial, run_in_fresh_interpreter, timed_out
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


class JobExecutor:
    """What the Ray and Slurm executors share: `job` runs a trial as one of the engine's jobs and waits for its
    return code (LaneFailure when the engine lost it); the jobs in flight are tracked for `cancel`."""

    name: str

    def __init__(self) -> None:
        self._jobs: set[Any] = set()
        self._lock = threading.Lock()

    def job(self, lane: Lane, spec_path: str, log_path: str, env: dict[str, str], timeout_s: float) -> int | None:
        raise NotImplementedError

    def track(self, job: Any, running: bool) -> None:
        with self._lock:
            (self._jobs.add if running else self._jobs.discard)(job)

    def in_flight(self) -> list[Any]:
        with self._lock:
            return list(self._jobs)

    def close(self) -> None:
        pass


class JobRunner:
    """A lane of a JobExecutor: the trial prepared here, run as the engine's job, its outcome read back from its
    folder as the local runner classifies it."""

    def __init__(self, executor: JobExecutor, lane: Lane) -> None:
        self.executor, self.lane, self.index = executor, lane, lane.index

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
        spec_path, _, log_path = prepare_trial(spec, work_dir)
        start = time.perf_counter()
        returncode = self.executor.job(self.lane, str(spec_path), str(log_path), env or {}, timeout_s)
        wall_s, folder = time.perf_counter() - start, spec_path.parent
        if returncode is None:
            return timed_out(timeout_s, folder / "trial.log", wall_s)
        return TrialRunner.classify(returncode, folder / "result.json", folder / "trial.log", wall_s)


def run_trial_job(spec_path: str, log_path: str, env: dict[str, str], timeout_s: float) -> int | None:
    """The job's body: the trial in a fresh interpreter; its return code, or None when it timed out."""
    return run_in_fresh_interpreter(Path(spec_path), Path(log_path), env, timeout_s)


def extra(module: str, executor: str, what: str) -> Any:
    """The module of an executor's optional extra; UserError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"--executor {executor} needs {what}: pip install 'perfscope[{executor}]'") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")

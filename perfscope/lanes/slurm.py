"""The Slurm executor (`--executor slurm`, extra `perfscope[slurm]`): each trial is a Slurm job, submitted through
submitit from wherever `perfscope analyze` runs (a login node: no sbatch script to write).

Design notes: docs/parallel.md."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path
from typing import Any

from perfscope.lanes.executors import JobExecutor, JobRunner, LaneFailure, extra, first_line, run_trial_job
from perfscope.lanes.plan import Lane

CLUSTER = "slurm"
"""submitit's cluster: always Slurm (a login node without Slurm must fail, not run the trials where it stands);
the tests set "local" only where no Slurm can start, and say so."""
JOB_OVERHEAD_S = 300.0
"""Minutes asked of Slurm beyond the trial's own timeout: the job's start-up, the interpreter's imports."""


def _submitit() -> Any:
    return extra("submitit", "slurm", "submitit")


CHECK_EVERY_S = 10.0
"""How often a waiting lane asks squeue for its job's state (the result file is checked every second): submitit
learns a job's end from sacct, which a cluster without accounting lacks, and a scancelled job would be waited for
forever."""
ENDED = ("BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT")


def _state(job_id: str) -> str | None:
    """The job's state from squeue (None once it has left the queue)."""
    try:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "UNKNOWN"
    return out.stdout.strip().split("\n")[0] or None if out.returncode == 0 else None


def _ended(state: str) -> bool:
    return state.split()[0] in ENDED


def _ended_first(job_id: str, state: str | None) -> LaneFailure:
    return LaneFailure(f"slurm job {job_id} {state or 'left the queue'} before its trial finished")


def _wait(job: Any) -> None:
    """Until the job's result is written; LaneFailure when Slurm ended the job first (with its state)."""
    checked = time.monotonic()
    while not job.done():
        time.sleep(1.0)
        if time.monotonic() - checked < CHECK_EVERY_S:
            continue
        checked = time.monotonic()
        state = _state(job.job_id)
        if state is None or _ended(state):
            time.sleep(2.0)  # a result written just before the end
            if not job.done():
                raise _ended_first(job.job_id, state)


def _raise_if_ended(job_id: str, settle_s: float = 5.0) -> None:
    """LaneFailure when Slurm ended the job that returned a failed trial: a `scancel` or a pre-emption signals the
    trial first, and submitit's job, which outlives the signal, writes the killed child's return code as its result,
    which would read as the trial's own failure."""
    deadline = time.monotonic() + settle_s
    while True:
        state = _state(job_id)
        if state is not None and _ended(state):
            raise _ended_first(job_id, state)
        if state is None or state.split()[0] == "COMPLETED" or time.monotonic() > deadline:
            return
        time.sleep(0.5)


class SlurmExecutor(JobExecutor):
    name = "slurm"

    def __init__(self, work_dir: Path, *, partition: str | None = None, gpus_per_node: int | None = None,
                 timeout_s: float = 600.0) -> None:
        super().__init__()
        submitit = _submitit()
        self.folder = work_dir / "_slurm"
        self.executor = submitit.AutoExecutor(folder=self.folder / "%j", cluster=CLUSTER)
        parameters: dict[str, Any] = {"timeout_min": math.ceil((timeout_s + JOB_OVERHEAD_S) / 60), "nodes": 1,
                                      "tasks_per_node": 1, "name": "perfscope-trial"}
        if partition:
            parameters["slurm_partition"] = partition
        if gpus_per_node:
            parameters["gpus_per_node"] = gpus_per_node
        self.executor.update_parameters(**parameters)
        self.cpus: dict[int, int] = {}

    def runner(self, lane: Lane) -> JobRunner:
        # Slurm pins the job to its allocation and assigns its GPUs: the driver's core numbers mean nothing there.
        self.cpus[lane.index] = max(1, len(lane.cpus))
        return JobRunner(self, Lane(lane.index))

    def job(self, lane: Lane, spec_path: str, log_path: str, env: dict[str, str], timeout_s: float) -> int | None:
        submitit = _submitit()
        with self._lock:  # update_parameters and submit on one executor object: one lane at a time
            self.executor.update_parameters(cpus_per_task=self.cpus[lane.index])
            job = self.executor.submit(run_trial_job, spec_path, log_path, {**env, **lane.env()}, timeout_s)
            self._jobs.add(job)
        try:
            _wait(job)
            returncode = job.result()
            if returncode:
                _raise_if_ended(job.job_id)
            return returncode
        except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedJobError) as exc:
            raise LaneFailure(f"slurm job {job.job_id} {job.state}: {first_line(exc)}") from None
        finally:
            self.track(job, False)

    def cancel(self) -> str:
        jobs = self.in_flight()
        for job in jobs:
            job.cancel(check=False)
        return f"{len(jobs)} Slurm job(s) cancelled (scancel {' '.join(str(j.job_id) for j in jobs)})".replace(" ()", "")

"""What an engine's job does with a lane's trial, and how the driver reads it back: shared by the Ray and Slurm
executors (perfscope.lanes.ray, perfscope.lanes.slurm).

Design notes: docs/parallel.md."""

from __future__ import annotations

from pathlib import Path

from perfscope.trial.runner import Outcome, TrialRunner, run_in_fresh_interpreter, timed_out


def run_trial_job(spec_path: str, log_path: str, env: dict[str, str], timeout_s: float) -> int | None:
    """The job's body: the trial in a fresh interpreter; its return code, or None when it timed out."""
    return run_in_fresh_interpreter(Path(spec_path), Path(log_path), env, timeout_s)


def read_back(returncode: int | None, spec_path: Path, timeout_s: float, wall_s: float) -> Outcome:
    """The trial's outcome from its folder, as the local runner classifies it."""
    folder = spec_path.parent
    if returncode is None:
        return timed_out(timeout_s, folder / "trial.log", wall_s)
    return TrialRunner.classify(returncode, folder / "result.json", folder / "trial.log", wall_s)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")

"""Entry point of a trial process: `main(["child", SPEC.json])`, forked by the zygote or run as
`python -m perfscope.trial.child SPEC.json` in a fresh interpreter.

Design notes: docs/measurement.md."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from perfscope.errors import WorkloadError
from perfscope.results import to_jsonable, write_json
from perfscope.results.io import open_log
from perfscope.trial.launch import rank_log_path, rank_result_path
from perfscope.trial.pin import pin_to_lane
from perfscope.trial.spec import ChildSpec, ProbeSpec, SpecError, TrialSpec, read_spec
from perfscope.workload import load_workload

OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")
# Allocator failures that CUDA libraries report with their own status codes instead of torch.OutOfMemoryError:
# cuBLAS/cuDNN/cuFFT/cuSOLVER/cuSPARSE handles and workspaces are allocated lazily, often in the first step of a
# larger micro-batch, and fail as e.g. "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`".
# They mean "does not fit" just as an OOM does, so the micro-batch search must bisect instead of stopping.
ALLOC_FAILURE_MARKERS = ("_status_alloc_failed", "cufft_alloc_failed", "cudaerrormemoryallocation", "cuda_error_out_of_memory")


def classify_exception(exc: BaseException) -> str:
    """'oom' by exception type first, by message as a fallback (CPU allocators raise RuntimeError; CUDA
    libraries report allocation failures as their own status codes), following the exception's cause chain
    (user code may wrap the OOM in its own exception)."""
    import torch

    from perfscope.trial.loop import CompileNotApplied

    if isinstance(exc, CompileNotApplied):
        return "error"
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, torch.OutOfMemoryError | MemoryError):
            return "oom"
        message = str(current).lower()
        if any(m in message for m in OOM_MESSAGES) or any(m in message for m in ALLOC_FAILURE_MARKERS):
            return "oom"
        current = current.__cause__ or current.__context__
    return "error"


def failure(exc: BaseException, lines: int = 12) -> dict[str, Any]:
    """The outcome of a trial that raised: its status, the error and the traceback's last lines."""
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return {"status": classify_exception(exc), "error": f"{type(exc).__name__}: {exc}", "traceback": "\n".join(text[-lines:])}


def _run_trial(spec: TrialSpec, result_path: Path) -> dict[str, Any]:
    """Measure, write the timed result, then (optionally) the diagnostics — a trace, and the Dataset's profile when
    the step waited for data — and write the result again: a profiler that kills the process costs only the trace."""
    from perfscope.trial.data import profile_dataset_cost
    from perfscope.trial.loop import capture_trace, nonfinite_loss, run_trial

    workload = load_workload(spec.workload_path)
    config = spec.config
    run = run_trial(workload, config)
    metrics = run.metrics
    if (nonfinite := nonfinite_loss(metrics.losses)) is not None:
        return {"status": "nonfinite", "error": nonfinite, "metrics": to_jsonable(metrics)}
    outcome = {"status": "ok", "error": None, "metrics": to_jsonable(metrics), "phase": "timed"}
    if config.capture_trace and spec.artifacts_dir:
        write_json(result_path, outcome)
        capture_trace(run, config, Path(spec.artifacts_dir))
        profile_dataset_cost(workload, config, metrics)  # when the step waited for data: where the Dataset's time goes
        outcome = {"status": "ok", "error": None, "metrics": to_jsonable(metrics), "phase": "done"}
    return outcome


def _run_probe(spec: ProbeSpec) -> dict[str, Any]:
    """Resolve the device, validate the workload with one step on it, inspect the model, describe the machine."""
    import torch

    from perfscope.measure.environment import collect_environment
    from perfscope.trial.validate import inspect_model, validate_workload

    device = spec.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        return {"status": "invalid", "error": "--device cuda was requested but CUDA is not available (torch.cuda.is_available() is False)"}
    facts, step_s = None, None
    if spec.workload_path:
        try:
            workload = load_workload(spec.workload_path)
            if workload.wraps_model:
                from perfscope.trial.data_parallel import init_single_process_group

                init_single_process_group(device)
            step_s = validate_workload(workload, spec.workload_path, device=device)
            facts = inspect_model(workload)
        except WorkloadError as exc:
            return {"status": "invalid", "error": str(exc)}
    env = collect_environment(device, measure_ceiling=spec.measure_ceiling)
    return {"status": "ok", "error": None, "device": device, "environment": to_jsonable(env), "model": to_jsonable(facts),
            "step_s": step_s}


def _run_rank_of_job(spec: ChildSpec, result_path: Path) -> int:
    """One rank of a torchrun job (perfscope.trial.launch): its own log and result file; non-zero exit on failure
    so that torchrun's agent stops the other ranks at once instead of waiting for them."""
    import os

    from perfscope.trial.rank import run_rank

    rank = int(os.environ.get("RANK", "0"))
    with open_log(rank_log_path(result_path.parent / "trial.log", rank)) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        outcome = run_rank(spec, result_path)
    except BaseException as exc:  # noqa: BLE001 - every failure is a recorded status
        outcome = failure(exc)
    write_json(rank_result_path(result_path, rank), outcome)
    return 0 if outcome.get("status") in ("ok", "stop") else 1


def main(argv: list[str]) -> int:
    pin_to_lane()  # a parallel sweep's lane: its cores only (perfscope.trial.pin); nothing without PERFSCOPE_LANE_CPUS
    spec = read_spec(Path(argv[1]))  # a SpecError here is a perfscope bug: the traceback, and no result (crashed)
    result_path = Path(spec.result_path or "")
    if not isinstance(spec, ProbeSpec) and spec.launch is not None:  # a rank of a torchrun job: trial, follow, stop
        return _run_rank_of_job(spec, result_path)
    oom = _oom_snapshot(spec, result_path)
    try:
        match spec:
            case ProbeSpec():
                outcome = _run_probe(spec)
            case TrialSpec():
                outcome = _run_trial(spec, result_path)
            case _:
                raise SpecError(f"a {spec.mode} spec runs only as a rank of a torchrun job")
    except BaseException as exc:  # noqa: BLE001 - every failure is a recorded status
        outcome = failure(exc)
        if oom is not None and oom.summary is not None:  # what held the memory, and the snapshot memory_viz opens
            outcome["error"] += f"\n{oom.summary.text()}"
    write_json(result_path, outcome)
    return 0


def _oom_snapshot(spec: ChildSpec, result_path: Path) -> Any:
    """A CUDA trial's allocator snapshot at an out-of-memory, beside its result (history off: it costs nothing
    before the OOM, and the timed steps are not slowed by a stack per allocation)."""
    if not isinstance(spec, TrialSpec) or spec.config.device != "cuda":
        return None
    from perfscope.measure.allocator_snapshot import OomSnapshot

    oom = OomSnapshot(result_path.parent)
    return oom if oom.start() else None


if __name__ == "__main__":
    sys.exit(main(sys.argv))

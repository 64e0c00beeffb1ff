"""Entry point of a trial process: `python -m perfscope.trial.child SPEC.json`.

The parent (perfscope.trial.runner) starts this in a fresh interpreter and its own process group, so
an OOM, a poisoned CUDA context, a segfault or a hang dies with the process. The outcome is written
atomically to the spec's `result_path`; a missing result file means the process crashed.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from perfscope.results import to_jsonable, write_json

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


def error_tail(exc: BaseException, lines: int = 12) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return "\n".join(text[-lines:])


def _run_trial(spec: dict[str, Any]) -> dict[str, Any]:
    from perfscope.trial.config import TrialConfig
    from perfscope.trial.loop import all_finite, run_trial
    from perfscope.workload import load_workload

    workload = load_workload(spec["workload_path"])
    config = TrialConfig.from_dict(spec["config"])
    artifacts = Path(spec["artifacts_dir"]) if spec.get("artifacts_dir") else None
    if artifacts is not None:
        artifacts.mkdir(parents=True, exist_ok=True)
    metrics = run_trial(workload, config, artifacts)
    if not all_finite(metrics.losses):
        bad = next(i for i, v in enumerate(metrics.losses) if v != v or v in (float("inf"), float("-inf")))
        return {"status": "nonfinite", "error": f"loss became {metrics.losses[bad]} at measured step {bad}", "metrics": to_jsonable(metrics)}
    return {"status": "ok", "error": None, "metrics": to_jsonable(metrics)}


def _run_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Validate the workload with one step on the trial device, then describe the machine.

    Validating here rather than in the parent keeps the parent free of CUDA and makes the dry run fast
    on a GPU (one GPT-2 step on a CPU takes tens of seconds).
    """
    from perfscope.errors import WorkloadError
    from perfscope.measure.environment import collect_environment
    from perfscope.trial.validate import validate_workload
    from perfscope.workload import load_workload

    if spec.get("workload_path"):
        try:
            validate_workload(load_workload(spec["workload_path"]), spec["workload_path"], device=spec["device"])
        except WorkloadError as exc:
            return {"status": "invalid", "error": str(exc)}
    env = collect_environment(spec["device"], measure_ceiling=spec.get("measure_ceiling", True))
    return {"status": "ok", "error": None, "environment": to_jsonable(env)}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    result_path = Path(spec["result_path"])
    try:
        outcome = _run_probe(spec) if spec.get("mode") == "probe" else _run_trial(spec)
    except BaseException as exc:  # noqa: BLE001 - every failure is a recorded status
        outcome = {"status": classify_exception(exc), "error": f"{type(exc).__name__}: {exc}", "traceback": error_tail(exc)}
    write_json(result_path, outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

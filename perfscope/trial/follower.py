"""The other nodes of a multi-node analysis: `perfscope worker FILE --nnodes N --node-rank R --rdzv-endpoint H:P`.

Design notes: docs/measurement.md."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from perfscope.trial.launch import Launch, rank_result_path, read_result, run_job
from perfscope.trial.runner import prepare_trial
from perfscope.trial.spec import FollowSpec, StopSpec

BETWEEN_JOBS_S = 2.0
"""A pause before joining the next job: node 0's agent of the last job must be gone, or this node's agent could
meet it at the rendezvous instead of the next one."""


def follow(workload_path: Path, launch: Launch, *, device: str, work_dir: Path, job_timeout_s: float = 24 * 3600,
           max_jobs: int | None = None) -> int:
    """Lend this node's ranks to node 0's trials until it says stop (0), or ``max_jobs`` ran (1)."""
    if launch.node_rank == 0:
        raise ValueError("node 0 runs `perfscope analyze`; `perfscope worker` is for the other nodes")
    jobs = 0
    while max_jobs is None or jobs < max_jobs:
        jobs += 1
        job_dir = work_dir / f"job{jobs:04d}"
        spec_path, result_path, log_path = prepare_trial(
            FollowSpec(device=device, workload_path=str(workload_path.resolve()), work_dir=str(job_dir), launch=launch),
            job_dir)
        print(f"perfscope worker: node {launch.node_rank} joining job {jobs} at {launch.rdzv_endpoint} ...",
              file=sys.stderr, flush=True)
        outcome = run_job(spec_path, result_path, log_path, launch=launch, timeout_s=job_timeout_s)
        statuses = [(read_result(rank_result_path(result_path, r)) or {}).get("status") for r in launch.local_ranks]
        if "stop" in statuses:
            print("perfscope worker: node 0's analysis is over", file=sys.stderr)
            return 0
        # Rank 0 (on node 0) writes the job's result; here each local rank's own status is what there is to say.
        said = ", ".join(f"rank {r}: {st or 'no result'}" for r, st in zip(launch.local_ranks, statuses, strict=True))
        print(f"perfscope worker: job {jobs} ended ({said}; the job: {outcome.status if outcome.status != 'crashed' else 'see node 0'})",
              file=sys.stderr, flush=True)
        time.sleep(BETWEEN_JOBS_S)
    return 1


def stop_followers(launch: Launch, work_dir: Path, *, device: str, timeout_s: float = 300.0) -> str:
    """Node 0, at the end of its analysis: one last job whose spec says stop (the followers' loop ends); on the
    trials' device, so every rank joins with the same backend."""
    spec_path, result_path, log_path = prepare_trial(StopSpec(device=device, launch=launch), work_dir)
    return run_job(spec_path, result_path, log_path, launch=launch, timeout_s=timeout_s).status

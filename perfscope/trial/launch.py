"""A distributed trial: one torchrun job (PyTorch's elastic agent), every rank a trial process, one outcome.

Design notes: docs/measurement.md."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from perfscope.errors import ResultsError
from perfscope.results.io import log_tail, open_log, read_json
from perfscope.trial.pin import born_on, lane_cpus

KILL_GRACE_S = 5.0
COLLECTIVE_FAILURE = re.compile(
    r"timed out|timeout|connection (?:closed|reset)|broken pipe|peer|socket|gloo|nccl|ProcessGroup|"
    r"DistBackendError|store|Connection refused",
    re.I,
)
"""Errors a rank raises because a *peer* failed (a collective that timed out or lost its connection)."""
ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
"""torchrun's failure summary names the first rank that failed and its exit code."""


@dataclass(frozen=True, kw_only=True)
class Launch:
    """torchrun's launch arguments for every distributed trial of an analysis (passed through, never reinvented)."""

    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    """host:port of node 0 (multi-node); one node without it uses --standalone (a free local port)."""
    rdzv_backend: str = "static"
    """static: node ranks as given (node 0 hosts rank 0, which writes the results); c10d: torchrun's dynamic one."""
    collective_timeout_s: float = 120.0
    """init_process_group's timeout: a collective waiting longer for a peer fails, naming the hang."""

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def local_ranks(self) -> range:
        """The global ranks on this node (static rendezvous: node_rank × nproc_per_node + local rank): only their
        result files are on this machine."""
        first = self.node_rank * self.nproc_per_node
        return range(first, first + self.nproc_per_node)

    def torchrun_args(self, *, numa_binding: str | None = None) -> list[str]:
        args = ["--nproc-per-node", str(self.nproc_per_node), "--max-restarts", "0", "--monitor-interval", "0.5"]
        if self.nnodes == 1 and self.rdzv_endpoint is None:
            args.append("--standalone")
        else:
            if self.rdzv_endpoint is None:
                raise ValueError("a multi-node launch needs rdzv_endpoint (host:port of node 0)")
            args += ["--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank),
                     "--rdzv-backend", self.rdzv_backend, "--rdzv-endpoint", self.rdzv_endpoint]
        if numa_binding:
            args += ["--numa-binding", numa_binding]
        return args


@dataclass
class Outcome:
    """How a trial (one process or a torchrun job) ended."""

    status: str
    error: str | None
    payload: dict[str, Any]  # the child's result JSON ("metrics" / "environment"), empty when it died
    wall_time_s: float


def killpg(pgid: int, sig: signal.Signals) -> None:
    """Signal a process group that may be gone already."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def how_it_ended(returncode: int) -> str:
    """"killed by signal SIGKILL" or "exited with code 1"."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"killed by signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def read_result(path: Path) -> dict[str, Any] | None:
    """A trial's result file, or None when it is missing or unreadable (a process that died wrote nothing)."""
    try:
        payload = read_json(path)
    except ResultsError:
        return None
    return payload if isinstance(payload, dict) else None


def rank_result_path(result_path: Path, rank: int) -> Path:
    return result_path.with_name(f"{result_path.stem}.rank{rank}.json")


def rank_log_path(log_path: Path, rank: int) -> Path:
    return log_path.with_name(f"rank{rank}.log")


def command(spec_path: Path, launch: Launch, *, numa_binding: str | None = None) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launch.torchrun_args(numa_binding=numa_binding),
            "-m", "perfscope.trial.child", str(spec_path)]


def kill_tree(root: int) -> None:
    """SIGKILL a process and every descendant (torchrun puts each worker in a session of its own: no group kill
    reaches them). Descendants are listed before anything dies, so none is re-parented out of sight first."""
    try:
        parent = psutil.Process(root)
        family = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return
    for proc in family:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=KILL_GRACE_S)


def run_in_session(argv: list[str], log_path: Path, env: dict[str, str], timeout_s: float,
                   running: set[int] | None = None) -> int | None:
    """``argv`` in a session of its own (deaf to the terminal's Ctrl-C), on a lane's cores when ``env`` names them
    (perfscope.trial.pin): its return code, or None when it ran past ``timeout_s`` (SIGTERM first: a torchrun agent
    stops its workers and writes its summary). ``running`` holds its process group while it runs. What it leaves
    (DataLoader workers, torchrun's workers in sessions of their own) dies with it, also on Ctrl-C in the parent."""
    with open_log(log_path) as log:
        with born_on(lane_cpus(env)):
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        if running is not None:
            running.add(proc.pid)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            return None
        finally:
            kill_tree(proc.pid)
            killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if running is not None:
                running.discard(proc.pid)


def run_job(spec_path: Path, result_path: Path, log_path: Path, *, launch: Launch, timeout_s: float,
            env: dict[str, str] | None = None, numa_binding: str | None = None) -> Outcome:
    """Run the spec as a torchrun job; classify how it ended (see the module docstring)."""
    result_path.unlink(missing_ok=True)
    for rank in launch.local_ranks:
        rank_result_path(result_path, rank).unlink(missing_ok=True)
    start = time.perf_counter()
    timed_out = run_in_session(command(spec_path, launch, numa_binding=numa_binding), log_path, env or {}, timeout_s) is None
    wall = time.perf_counter() - start
    return classify_job(result_path, log_path, launch=launch, timed_out=timed_out, timeout_s=timeout_s, wall=wall)


def classify_job(result_path: Path, log_path: Path, *, launch: Launch, timed_out: bool, timeout_s: float,
                 wall: float) -> Outcome:
    """The job's outcome: rank 0's gathered result when the job succeeded; else the first rank to fail, and why."""
    job = read_result(result_path)
    if job is not None and job.get("status") in ("ok", "stop") and not timed_out:
        return Outcome(str(job["status"]), None, job, wall)
    ranks = {r: read_result(rank_result_path(result_path, r)) for r in launch.local_ranks}
    agent_log = log_tail(log_path, 40)
    own_failures = [(r, p) for r, p in ranks.items()
                    if p is not None and p.get("status") not in ("ok", None) and not _victim(p)]
    if own_failures:
        rank, payload = own_failures[0]
        error = payload_error({**payload, "error": payload.get("error") or payload.get("status")})
        return Outcome(str(payload["status"]), f"rank {rank}: {error}", _rank_payload(payload), wall)
    root = ROOT_CAUSE.search(agent_log)
    if root is not None and ranks.get(int(root.group(1))) is None:
        rank, code = int(root.group(1)), int(root.group(2))
        return Outcome("crashed", f"rank {rank}: process {how_it_ended(code)} without a result\n{log_tail(rank_log_path(log_path, rank))}",
                          {}, wall)
    victims = [r for r, p in ranks.items() if p is not None and _victim(p)]
    silent = [r for r, p in ranks.items() if p is None or p.get("status") is None]
    if victims and silent:
        rank = silent[0]
        why = ranks[victims[0]].get("error", "") if ranks[victims[0]] else ""  # type: ignore[union-attr]
        return Outcome("timeout", (f"rank {rank} stopped responding: rank(s) {', '.join(map(str, victims))} timed out "
                                      f"waiting for it in a collective (collective timeout {launch.collective_timeout_s:g} s)"
                                      f"\n{why.splitlines()[0] if why else ''}"), {}, wall)
    if timed_out:
        which = f"rank(s) {', '.join(map(str, silent))} never finished" if silent else "the job did not end"
        return Outcome("timeout", f"trial exceeded {timeout_s:g} s and was killed: {which}\n{agent_log[-1500:]}", {}, wall)
    if job is not None:  # rank 0 wrote a failure of its own after the ranks' files were classified as fine
        return Outcome(str(job.get("status", "error")), f"rank 0: {job.get('error')}", job, wall)
    if victims:
        rank = victims[0]
        return Outcome("error", f"rank {rank}: {ranks[rank].get('error')}", {}, wall)  # type: ignore[union-attr]
    return Outcome("crashed", f"the torchrun job ended without a result\n{agent_log[-1500:]}", {}, wall)


def payload_error(payload: dict[str, Any]) -> str | None:
    """A child's error, with its traceback's last lines when it wrote them (perfscope.trial.child.failure)."""
    error = payload.get("error")
    return f"{error}\n{payload['traceback']}" if payload.get("traceback") else error


def _victim(payload: dict[str, Any]) -> bool:
    return payload.get("status") in ("error", "crashed") and bool(COLLECTIVE_FAILURE.search(str(payload.get("error", ""))))


def _rank_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """What a failed rank measured (a non-finite loss still has its metrics)."""
    return {k: v for k, v in payload.items() if k == "metrics"}

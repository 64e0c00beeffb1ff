"""Run one trial in a fresh process, in its own process group, with a timeout that kills the whole group.

    outcome = run_isolated({"workload_path": ..., "config": {...}}, work_dir, timeout_s=600)
    outcome.status  # ok | oom | error | crashed | timeout | nonfinite

Why a fresh interpreter per trial (and not multiprocessing.fork): an OOM may leave memory unreleased
(Lightning #7335), a CUDA illegal-address error poisons the context for the rest of the process, and a
hang must be killable — asv kills the process group, DeepSpeed autotuning has no timeout and hangs
(DeepSpeed #4100). The process group includes DataLoader workers, so a timeout leaves no zombies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KILL_GRACE_S = 5.0


@dataclass
class Outcome:
    status: str
    error: str | None
    payload: dict[str, Any]  # the child's result JSON ("metrics" / "environment"), empty when it died
    wall_time_s: float


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _kill_group(pgid: int) -> None:
    """SIGTERM the group, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def run_isolated(spec: dict[str, Any], work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
    """Start `python -m perfscope.trial.child` on ``spec``; classify how it ended."""
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = work_dir / "spec.json", work_dir / "result.json", work_dir / "trial.log"
    result_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps({**spec, "result_path": str(result_path)}), encoding="utf-8")
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfscope.trial.child", str(spec_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            start_new_session=True,  # own session and process group: killable as a whole, deaf to the terminal's Ctrl-C
        )
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
            return Outcome("timeout", f"trial exceeded {timeout_s:g} s and was killed\n{_tail(log_path)}", {}, time.perf_counter() - start)
        except BaseException:  # Ctrl-C in the parent: take the trial down with us, then re-raise
            _kill_group(proc.pid)
            proc.wait()
            raise
        finally:
            _kill_group(proc.pid)  # leftover DataLoader workers or grandchildren of a finished trial
    wall = time.perf_counter() - start
    if result_path.exists():
        try:
            payload = json.loads(result_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            return Outcome("crashed", f"unreadable trial result: {exc}", {}, wall)
        error = payload.get("error")
        if payload.get("traceback"):
            error = f"{error}\n{payload['traceback']}"
        return Outcome(payload.get("status", "error"), error, payload, wall)
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        reason = f"trial process killed by signal {name}"
    else:
        reason = f"trial process exited with code {returncode} without a result"
    return Outcome("crashed", f"{reason}\n{_tail(log_path)}", {}, wall)

"""Run one trial in a fresh process, in its own process group, with a timeout that kills all it started.

Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import IO

from perfscope.errors import ResultsError
from perfscope.measure.contention import SWEEP_ROOT_ENV
from perfscope.results.io import log_tail, open_log, read_json
from perfscope.results.messages import msg
from perfscope.results.serde import to_jsonable
from perfscope.trial.launch import Outcome, how_it_ended, killpg, payload_error, run_in_session, run_job
from perfscope.trial.pin import LANE_CPUS_ENV, born_on
from perfscope.trial.spec import ChildSpec, TrialSpec, write_spec
from perfscope.trial.zygote import ForkRequest

KILL_GRACE_S = 5.0
ZYGOTE_START_TIMEOUT_S = 120.0
ISOLATION_ENV = "PERFSCOPE_ISOLATION"
LATE_READ_ENV = frozenset({"PYTORCH_CUDA_ALLOC_CONF", LANE_CPUS_ENV, SWEEP_ROOT_ENV})
"""Environment variables torch reads when first used, not at import, or that the trial applies itself (a lane's
cores, perfscope.trial.pin; its sweep's driver, perfscope.measure.contention): safe to set in a forked child."""
__all__ = ["Outcome", "TrialRunner", "prepare_trial", "run_in_fresh_interpreter", "timed_out"]


def needs_fresh_interpreter(env: dict[str, str] | None) -> bool:
    """A trial whose environment differs in what Python or torch read at import time."""
    if os.environ.get(ISOLATION_ENV, "").lower() == "spawn" or not hasattr(os, "fork"):
        return True
    return bool(set(env or {}) - LATE_READ_ENV)


class _Zygote:
    """The fork server process and a reader thread that sorts its replies."""

    def __init__(self, log_path: Path, cpus: frozenset[int] | None = None) -> None:
        self._log = open_log(log_path)  # lives as long as the zygote
        with born_on(cpus):  # a lane's zygote, and every trial it forks, on the lane's cores (perfscope.trial.pin)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "perfscope.trial.zygote"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # deaf to the terminal's Ctrl-C: the runner decides what dies
            )
        self._pids: queue.Queue[int] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._cond = threading.Condition()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        if not self._ready.wait(ZYGOTE_START_TIMEOUT_S) or self.proc.poll() is not None:
            self.close()
            raise RuntimeError(f"the trial zygote did not start (see {log_path})")

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "ready" in message:
                self._ready.set()
            elif "pid" in message:
                self._pids.put(int(message["pid"]))
            elif "exit" in message:
                with self._cond:
                    self._exits[int(message["exit"])] = int(message["returncode"])
                    self._cond.notify_all()
        with self._cond:  # the zygote is gone: wake every waiter
            self._cond.notify_all()
        self._ready.set()  # ... and the start-up wait: a zygote that died importing is known at once, not after a timeout

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, spec_path: Path, log_path: Path, env: dict[str, str]) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(ForkRequest(str(spec_path), str(log_path), dict(env)).to_line())
        self.proc.stdin.flush()
        return self._pids.get(timeout=60)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The trial's return code, or None when ``timeout`` passed first (or the zygote died)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while pid not in self._exits:
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or not self.alive:
                    return None
                self._cond.wait(remaining if remaining is None else min(remaining, 0.5))
            return self._exits.pop(pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # the zygote ends its trials and exits on EOF
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def _close_all(holder: list[_Zygote]) -> None:
    while holder:
        holder.pop().close()


class TrialRunner:
    """Starts trials (forked from a zygote when possible), times them out, classifies how they ended."""

    def __init__(self, work_dir: Path | None = None, *, use_zygote: bool = True,
                 cpus: frozenset[int] | None = None) -> None:
        self.work_dir = work_dir
        self.use_zygote = use_zygote
        self.cpus = cpus
        """A parallel sweep's lane: the zygote is started on these cores (None: wherever this process may run)."""
        self._holder: list[_Zygote] = []
        self._zygote_failed: str | None = None
        self._running: set[int] = set()
        """Process groups of the trials in flight: what `kill_running` ends (a parallel sweep's Ctrl-C)."""
        # A runner dropped without close() (a library caller, a test) must not leave its zygote behind for the
        # life of the calling process: the finalizer closes it when the runner is collected.
        weakref.finalize(self, _close_all, self._holder)

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        _close_all(self._holder)

    def kill_running(self) -> int:
        """SIGKILL the process group of every trial in flight (from another thread: a parallel sweep's lanes block in
        `run`, and Ctrl-C reaches only the main thread); each `run` then returns its trial as killed. How many."""
        running = list(self._running)
        for pgid in running:
            killpg(pgid, signal.SIGKILL)
        return len(running)

    def _zygote_for(self, work_dir: Path) -> _Zygote | None:
        if not self.use_zygote or self._zygote_failed is not None:
            return None
        if not (self._holder and self._holder[0].alive):
            _close_all(self._holder)  # a zygote that died: its log closed, a new one started
            try:
                self._holder.append(_Zygote((self.work_dir or work_dir.parent) / "zygote.log", self.cpus))
            except Exception as exc:  # noqa: BLE001 - fall back to fresh interpreters, and say why once
                self._zygote_failed = f"{type(exc).__name__}: {exc}"
                return None
        return self._holder[0]

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome:
        """Run ``spec`` (see perfscope.trial.child) in a fresh process; classify how it ended."""
        spec_path, result_path, log_path = prepare_trial(spec, work_dir)
        env = dict(env or {})
        if isinstance(spec, TrialSpec) and spec.launch is not None:  # a torchrun job of fresh interpreters
            return run_job(spec_path, result_path, log_path, launch=spec.launch, timeout_s=timeout_s, env=env,
                           numa_binding=spec.config.numa_binding)
        zygote = None if needs_fresh_interpreter(env) else self._zygote_for(work_dir)
        start = time.perf_counter()
        if zygote is not None:
            pid = zygote.start(spec_path, log_path, env)
            self._running.add(pid)
            try:
                returncode = zygote.wait(pid, timeout_s)
                if returncode is None and zygote.alive:
                    killpg(pid, signal.SIGTERM)
                    zygote.wait(pid, KILL_GRACE_S)
                    killpg(pid, signal.SIGKILL)
                    return timed_out(timeout_s, log_path, time.perf_counter() - start)
                if returncode is None:
                    returncode = -int(signal.SIGKILL)  # the zygote died under the trial
            except BaseException:  # Ctrl-C in the parent: take the trial down with us, then re-raise
                killpg(pid, signal.SIGKILL)
                raise
            finally:
                self._running.discard(pid)
        else:
            returncode = run_in_fresh_interpreter(spec_path, log_path, env, timeout_s, self._running)
            if returncode is None:
                return timed_out(timeout_s, log_path, time.perf_counter() - start)
        return self.classify(returncode, result_path, log_path, time.perf_counter() - start)

    @staticmethod
    def classify(returncode: int, result_path: Path, log_path: Path, wall: float) -> Outcome:
        """How a trial ended, from its result file (written by perfscope.trial.child) and its return code."""
        if result_path.exists():
            try:
                payload = read_json(result_path)
            except ResultsError as exc:
                return Outcome("crashed", f"unreadable trial result: {exc}", {}, wall)
            if not isinstance(payload, dict):
                return Outcome("crashed", "unreadable trial result: not a JSON object", {}, wall)
            error = payload_error(payload)
            if payload.get("phase") == "timed" and "metrics" in payload:
                # Died after the timing was written: the measurement stands, the trace is what was lost.
                died = f"trial process {how_it_ended(returncode)}" if returncode != 0 else "ended"
                payload["metrics"].setdefault("unavailable", {})["trace"] = to_jsonable(msg("trial_died_in_trace", how=died))
            return Outcome(payload.get("status", "error"), error, payload, wall)
        return Outcome("crashed", f"trial process {how_it_ended(returncode)} without a result\n{log_tail(log_path)}", {}, wall)


def prepare_trial(spec: ChildSpec, work_dir: Path) -> tuple[Path, Path, Path]:
    """The trial's folder with its spec written and no stale result: (spec, result, log) paths. Any executor that
    runs the child (perfscope.lanes) starts from here, so the driver reads every result the same way."""
    work_dir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = work_dir / "spec.json", work_dir / "result.json", work_dir / "trial.log"
    result_path.unlink(missing_ok=True)
    write_spec(spec_path, dataclasses.replace(spec, result_path=str(result_path)))
    return spec_path, result_path, log_path


def timed_out(timeout_s: float, log_path: Path, wall_s: float) -> Outcome:
    """The outcome of a trial killed at its timeout."""
    return Outcome("timeout", f"trial exceeded {timeout_s:g} s and was killed\n{log_tail(log_path)}", {}, wall_s)


def run_in_fresh_interpreter(spec_path: Path, log_path: Path, env: dict[str, str], timeout_s: float,
                             running: set[int] | None = None) -> int | None:
    """`python -m perfscope.trial.child SPEC` in its own session (`run_in_session`): its return code, or None when
    it timed out. Also what a Slurm or Ray job runs on its node."""
    return run_in_session([sys.executable, "-m", "perfscope.trial.child", str(spec_path)], log_path, env, timeout_s,
                          running)

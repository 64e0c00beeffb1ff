"""A fork server for trial processes: torch imported once, every trial a fresh forked process.

Design notes: docs/measurement.md."""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
from dataclasses import dataclass
from typing import Any

import psutil

from perfscope.results.io import open_log
from perfscope.trial.launch import killpg

PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ForkRequest:
    """One line from the runner: fork a trial that reads ``spec`` (a perfscope.trial.spec file), logs to ``log``,
    with ``env`` added to its environment. Typed here, checked when read, like the spec it points to."""

    spec: str
    log: str
    env: dict[str, str]

    def to_line(self) -> bytes:
        return (json.dumps({"spec": self.spec, "log": self.log, "env": self.env}) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> ForkRequest:
        data = json.loads(line)
        if not isinstance(data, dict) or set(data) != {"spec", "log", "env"}:
            raise ValueError(f"a fork request is {{spec, log, env}}, got {line[:200]!r}")
        spec, log, env = data["spec"], data["log"], data["env"]
        if not (isinstance(spec, str) and isinstance(log, str) and isinstance(env, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ValueError(f"a fork request's spec and log are paths and env maps names to strings, got {line[:200]!r}")
        return cls(spec, log, env)


def _preload() -> None:
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - ~1 s: FLOP counting on fake tensors and compile trials import it
    import torch._subclasses.fake_tensor  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401

    import perfscope.measure.environment  # noqa: F401
    import perfscope.trial.child  # noqa: F401
    import perfscope.trial.loop  # noqa: F401
    import perfscope.trial.validate  # noqa: F401


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _run_child(job: ForkRequest) -> int:
    """In the forked child: a new session, the trial's own stdio and environment, then the trial."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)

    with open_log(job.log) as log:
        os.dup2(devnull, 0)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    os.environ.update(job.env)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's own descriptors
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    from perfscope.trial import child

    return child.main(["perfscope.trial.child", job.spec])


def _reap(trials: set[int]) -> None:
    """Report finished trials; kill what they left behind (re-parented to us as the subreaper)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in trials:
            continue  # an orphan we adopted and killed, now reaped
        trials.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        killpg(pid, signal.SIGKILL)  # the trial's DataLoader workers and other group members
        if not trials:
            _kill_adopted()
        _send({"exit": pid, "returncode": code})


def _kill_adopted() -> None:
    """With no trial running, any child of ours is a detached leftover of an ended trial."""
    for proc in psutil.Process().children():
        try:
            proc.kill()
        except psutil.Error:
            pass


def main() -> int:
    _become_subreaper()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner owns Ctrl-C; it kills us when done
    _preload()
    _send({"ready": os.getpid()})
    trials: set[int] = set()
    stdin = sys.stdin.buffer
    buffer = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.05)
        _reap(trials)
        if not readable:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:  # the runner went away: end our trials too
            for pid in trials:
                killpg(pid, signal.SIGKILL)
            return 0
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line.strip():
                continue
            job = ForkRequest.from_line(line)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _run_child(job)
                finally:
                    for stream in (sys.stdout, sys.stderr):
                        try:
                            stream.flush()
                        except Exception:  # noqa: BLE001 - exiting anyway
                            pass
                    os._exit(code)
            trials.add(pid)
            _send({"pid": pid})


if __name__ == "__main__":
    sys.exit(main())

"""The files a live hooked loop and `perfscope capture` exchange: plain JSON in plain folders, no socket, no daemon.

Design notes: docs/hooks.md."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

ROOT_ENV = "PERFSCOPE_LIVE_ROOT"
DIR_ENV = "PERFSCOPE_LIVE_DIR"
SIGNAL_ENV = "PERFSCOPE_LIVE_SIGNAL"
DEFAULT_SIGNAL = "SIGUSR2"
REQUEST = "request.json"
HEARTBEAT_S = 10.0
"""A polling process rewrites its status at least this often: a status older than 3× this is a process gone."""


def heartbeat_s(poll_s: float) -> float:
    """How often a process polling every ``poll_s`` rewrites its status (its step and rate)."""
    return min(HEARTBEAT_S, 4 * poll_s)

T = TypeVar("T")


@dataclass
class Status:
    """A hooked process that accepts capture requests."""

    pid: int
    host: str
    rank: int
    control: str
    """Its control folder (absolute)."""
    signal: str | None
    """The signal that wakes it at once (installed by the hooks); None: it polls its control folder."""
    poll_s: float | None
    """How often it reads its control folder (None: only when signalled)."""
    step: int = 0
    updated: float = 0.0
    steps_per_s: float = 0.0
    """Over the last heartbeat: with ``step`` and ``updated``, where the process is now."""
    proc_start: str | None = None
    """The process's start time as /proc records it: a PID reused by another process does not match."""


@dataclass
class Request:
    id: str
    steps: int
    start_step: int | None = None
    """The first step to record (every rank the same); None: the step after the one in progress."""
    created: float = 0.0
    memory: bool = False
    """Profile memory too: the window's bytes by category (perfscope.trace.memory_categories) beside the trace."""


@dataclass
class Answer:
    id: str
    pid: int
    host: str
    rank: int
    requested_step: int
    """The step boundary at which the process took the request."""
    first_step: int | None = None
    last_step: int | None = None
    trace: str | None = None
    error: str | None = None
    memory: str | None = None
    """The memory breakdown's file (memory-rank<R>.json), when asked and made."""


def registry_root() -> Path:
    root = os.environ.get(ROOT_ENV)
    return Path(root) if root else Path(tempfile.gettempdir()) / f"perfscope-live-{os.getuid() if hasattr(os, 'getuid') else 0}"


def host() -> str:
    return socket.gethostname()


def member(pid: int, host_name: str) -> str:
    """A process's name inside a control folder (PIDs repeat across the nodes sharing one)."""
    return f"{host_name}-{pid}"


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state) on, or None where there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def proc_start(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), or None where there is no /proc."""
    stat = _stat(pid)
    return stat[19] if stat is not None else None


def new_request(steps: int, start_step: int | None = None, *, memory: bool = False) -> Request:
    return Request(id=f"{int(time.time())}-{uuid.uuid4().hex[:8]}", steps=steps, start_step=start_step, created=time.time(),
                   memory=memory)


def write_json(path: Path, obj: Any) -> None:
    """Atomically: a temporary file in the same folder, renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(obj) if hasattr(obj, "__dataclass_fields__") else obj))
    os.replace(tmp, path)


def read_json(path: Path, kind: type[T]) -> T | None:
    """The dataclass in ``path``; None when it is absent or not (yet) one (unknown keys are ignored)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    names = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    try:
        return kind(**{k: v for k, v in data.items() if k in names})
    except TypeError:
        return None


def statuses(control: Path) -> list[Status]:
    """The processes registered in a control folder, newest status per process."""
    found = (read_json(p, Status) for p in sorted(control.glob("status-*.json")))
    return [s for s in found if s is not None]


def alive(status: Status, now: float | None = None) -> bool:
    """On this host: the process exists and is the one registered; elsewhere: its heartbeat is recent."""
    if status.host == host():
        try:
            os.kill(status.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        stat = _stat(status.pid)  # a zombie (exited, not yet reaped) is gone; a reused PID is another process
        return stat is None or (stat[0] != "Z" and status.proc_start in (None, stat[19]))
    return status.poll_s is not None and (now or time.time()) - status.updated < 3 * HEARTBEAT_S


def prune(root: Path) -> None:
    """Drop the registrations of this host's processes that are gone (killed before they could unregister)."""
    for path in root.glob("*.json"):
        status = read_json(path, Status)
        if status is not None and status.host == host() and not alive(status):
            path.unlink(missing_ok=True)
            folder = root / str(status.pid)
            for leftover in (folder / REQUEST, folder / f"status-{member(status.pid, status.host)}.json"):
                leftover.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()


def answer_path(control: Path, request_id: str, status: Status) -> Path:
    return control / f"done-{request_id}-{member(status.pid, status.host)}.json"


def capture_dir(control: Path, request_id: str, pid: int, host_name: str) -> Path:
    return control / "captures" / request_id / member(pid, host_name)

"""Waiting for another process in a test: on the event itself, with a generous deadline that fails loudly.

    wait_for(lambda: path.exists(), "the child's ready file", timeout_s=60)
    assert wait_gone(pids, timeout_s=30) == []           # processes that outlived the deadline, none expected
    line = read_until(proc.stderr, "baseline: running", timeout_s=120)

Why: a fixed `time.sleep` before an assertion is a guess at how long another process needs; on a loaded machine
the guess is wrong both ways (too short: a spurious failure; long enough everywhere: a slow suite). Polling the
condition costs nothing when it already holds and waits as long as it must, up to a deadline that names what
never happened.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO

import psutil

POLL_S = 0.02


def wait_for(condition: Callable[[], object], what: str, *, timeout_s: float = 60.0) -> None:
    """Return once ``condition()`` is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        time.sleep(POLL_S)


def alive(proc: int | psutil.Process) -> bool:
    """Running, not a zombie (a zombie has ended: only its parent's bookkeeping remains). A Process object also
    checks that its pid was not reused by a newer process."""
    try:
        process = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(procs: Iterable[int | psutil.Process], *, timeout_s: float = 30.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout_s`` for every one of them to end (empty: all ended)."""
    pending = list(procs)
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [p for p in pending if alive(p)]
        if not pending or time.monotonic() > deadline:
            return [p.pid if isinstance(p, psutil.Process) else p for p in pending]
        time.sleep(POLL_S)


def read_until(stream: IO[str], marker: str, *, timeout_s: float = 120.0) -> str:
    """Everything read from a child's text pipe up to and including the first line holding ``marker``; nothing
    after it is consumed (the caller may still `communicate()`). A thread reads, so a silent child is a timeout."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in iter(stream.readline, ""):
            lines.put(line)
            if marker in line:
                return
        lines.put(None)  # the stream ended

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    seen = ""
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line with {marker!r} within {timeout_s:g} s; read:\n{seen[-2000:]}") from None
        if line is None:
            raise AssertionError(f"the stream ended before a line with {marker!r}; read:\n{seen[-2000:]}")
        seen += line
        if marker in line:
            return seen


__all__ = ["alive", "read_until", "wait_for", "wait_gone"]


def ctrl_c_reaches_it() -> None:
    """A Popen preexec_fn for a terminal's Ctrl-C, whatever ran this suite: a job started in the background (`cmd &`,
    nohup) ignores SIGINT, and Python started with SIGINT ignored never raises KeyboardInterrupt. Restoring the
    default before exec gives the child Python's own handler, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

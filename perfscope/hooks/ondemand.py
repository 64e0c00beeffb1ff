"""On-demand capture of a running hooked loop: `perfscope capture PID` (or a request file) → a trace of its next steps.

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfscope.hooks.capture import CaptureWindow
from perfscope.live import protocol as p
from perfscope.measure.lazy_msg import words

_CONTROLS: weakref.WeakSet[LiveControl] = weakref.WeakSet()
"""The live profilers of this process: the one signal handler wakes them all."""
_INSTALLED: list[int] = []
"""The signal this process's handler is installed on (at most one)."""


def _wake(signum: int, frame: object) -> None:
    for control in list(_CONTROLS):
        control.flag = True


def _close_all() -> None:
    """At exit: every live profiler unregisters (the registry keeps no dead process)."""
    for control in list(_CONTROLS):
        control.close()


atexit.register(_close_all)


def _uninstall() -> None:
    """The last live profiler closed: the signal's default action back (only the main thread may set it)."""
    if _INSTALLED and not _CONTROLS and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            signal.signal(_INSTALLED.pop(), signal.SIG_DFL)


def _install(name: str) -> str | None:
    """Install the process-wide handler on ``name`` when the signal is free; the name installed, or None."""
    sig = getattr(signal, name, None)
    if sig is None or threading.current_thread() is not threading.main_thread():
        return None
    if _INSTALLED:
        return name if _INSTALLED[0] == sig else None
    if signal.getsignal(sig) is not signal.SIG_DFL:
        return None  # someone else's handler (SLURM's preemption notice, a framework's): left alone
    signal.signal(sig, _wake)
    _INSTALLED.append(sig)
    return name


def signal_name() -> str | None:
    """The signal to use: PERFSCOPE_LIVE_SIGNAL ("off", "SIGUSR1", ...), else SIGUSR2."""
    name = os.environ.get(p.SIGNAL_ENV, p.DEFAULT_SIGNAL).strip().upper()
    return None if name in ("", "OFF", "0", "NONE") else (name if name.startswith("SIG") else f"SIG{name}")


class LiveControl:
    """One profiler's end of the protocol: see the module docstring."""

    def __init__(self, control: str | os.PathLike[str] | None, *, rank: int, steps: Callable[[], int],
                 poll_s: float = 0.5, enabled: bool = True) -> None:
        self.flag = False
        """A request may be waiting, or a capture runs: the only thing the loop reads between captures."""
        self.enabled = enabled
        self.shared = control is not None
        self.rank, self.poll_s = rank, poll_s
        self.pid, self.host = os.getpid(), p.host()
        self.control = Path(control).resolve() if control is not None else p.registry_root() / str(self.pid)
        self.window: CaptureWindow | None = None
        self.request: p.Request | None = None
        self._requested_step = self._last_ended = 0
        self._done: set[str] = set()
        self._status: p.Status | None = None
        self._steps = steps
        """The optimizer steps the loop has completed (the Profiler's count)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen_mtime = 0.0

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register this process and start listening (a signal, or a poller); a failure is one warning."""
        if not self.enabled or self._status is not None:
            return
        try:
            sig = _install(name) if (name := signal_name()) else None
            polling = self.shared or sig is None
            self._status = p.Status(pid=self.pid, host=self.host, rank=self.rank, control=str(self.control),
                                    signal=sig, poll_s=self.poll_s if polling else None, step=self._steps(),
                                    updated=time.time(), proc_start=p.proc_start(self.pid))
            self._done = {r.id} if (r := p.read_json(self.control / p.REQUEST, p.Request)) is not None else set()
            self._write_status()
            p.prune(p.registry_root())
            p.write_json(self._registration(), self._status)
            _CONTROLS.add(self)
            if polling:
                self._thread = threading.Thread(target=self._poll, name="perfscope-live", daemon=True)
                self._thread.start()
        except Exception as exc:  # noqa: BLE001 - capture on demand is a convenience, never the job's problem
            self.enabled = False
            warnings.warn(f"perfscope: on-demand capture unavailable ({type(exc).__name__}: {exc})", RuntimeWarning,
                          stacklevel=4)

    def close(self) -> None:
        """Unregister (idempotent); a capture still running ends with its steps so far."""
        _CONTROLS.discard(self)
        _uninstall()
        self._stop.set()
        if self.window is not None:
            self.window.teardown()
            self._finished(self.window)
        if self._status is None:
            return
        for path in (self._registration(), self._status_path()):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        if not self.shared:  # this process's own folder: gone unless an answer waits there for the command
            (self.control / p.REQUEST).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.control.rmdir()  # unless not empty
        self._status = None

    # ------------------------------------------------------------------------------------ the loop's side

    @property
    def running(self) -> bool:
        return self.window is not None and self.window.running

    @property
    def end(self) -> int:
        """The step after the capture's last (the window's end once it started)."""
        return max(self.window.end, self.window.stop_step) if self.window is not None else -1

    def covers(self, index: int) -> bool:
        return self.window is not None and self.window.covers(index)

    def take(self, k: int) -> None:
        """Step ``k`` starts: read a waiting request into the window that will cover its steps. Never raises."""
        try:
            if self.window is None:
                self._take(k)
        except Exception as exc:  # noqa: BLE001 - the job's loop is never the one to fail
            self._fail(exc)

    def begin(self, k: int, device_type: str) -> bool:
        """Start the profiler when step ``k`` is the window's first (its warm-up step); True when it started."""
        window = self.window
        if window is not None and not window.running and k > window.first:  # its first step went by: the next ones
            start, stop = window.capture_steps
            window = self.window = CaptureWindow((k + 1, k + 1 + stop - start), window.trace_dir, memory=window.memory)
        if window is None or window.running or k != window.first:
            return False
        try:
            if window.start(device_type):
                return True
            self._finished(window)  # a profiler of the user's runs: the answer says so
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
        return False

    def capture_now(self, steps: int, trace_dir: Path) -> bool:
        """A capture asked from inside the process (the watch): from the step after the next boundary, into
        ``trace_dir``, answered to no one; False when one already runs or waits."""
        if self.window is not None:
            return False
        first = self._steps() + 2  # whether the boundary of the step in progress has been counted yet or not
        self.window, self.request, self.flag = CaptureWindow((first, first + steps), trace_dir), None, True
        return True

    def end_of_step(self, k: int) -> None:
        """Step ``k`` ended: the running capture records it, and answers after its last step. Never raises."""
        window = self.window
        try:
            if window is not None and window.running:
                self._last_ended = k
                window.step(k)
                if not window.running:
                    self._finished(window)
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)

    def _take(self, k: int) -> None:
        seen = self._seen_mtime
        request = p.read_json(self.control / p.REQUEST, p.Request)
        if request is None or request.id in self._done:
            if self._seen_mtime == seen:  # the poller saw no newer request meanwhile
                self.flag = False  # woken for nothing (an old request, a stray signal)
            return
        self._done.add(request.id)
        # The step after the one in progress, or the one every rank was asked to start at (if not already past).
        first = max(k + 1, request.start_step or 0)
        trace_dir = p.capture_dir(self.control, request.id, self.pid, self.host)
        window = CaptureWindow((first, first + request.steps), trace_dir, memory=request.memory)
        self.window, self.request, self._requested_step = window, request, k

    def _finished(self, window: CaptureWindow) -> None:
        start, stop = window.capture_steps
        trace = window.trace_path  # the steps recorded: all of them, or those before the loop ended (close())
        self._answer(first_step=start, last_step=min(stop - 1, self._last_ended),
                     trace=str(trace) if trace is not None else None,
                     error=None if trace is not None else words(window.missing()),
                     memory=str(window.memory_path) if window.memory_path else None)

    def _fail(self, exc: BaseException) -> None:
        if self.window is not None:
            self.window.teardown()
        self._answer(error=f"{type(exc).__name__}: {exc}")

    def _answer(self, **fields: Any) -> None:
        """Answer the request this capture was for (none: the watch's), and wait for the next."""
        if self.request is not None:
            answer = p.Answer(id=self.request.id, pid=self.pid, host=self.host, rank=self.rank,
                              requested_step=self._requested_step, **fields)
            with contextlib.suppress(OSError):  # disk full, folder gone: the command times out, having heard nothing
                p.write_json(self.control / f"done-{answer.id}-{p.member(self.pid, self.host)}.json", answer)
        self.window, self.request, self.flag = None, None, False

    # ------------------------------------------------------------------------------------ the poller

    def _poll(self) -> None:
        """Read the control folder every poll_s; rewrite the status (the heartbeat) at least every HEARTBEAT_S."""
        last_beat = time.monotonic()
        while not self._stop.wait(self.poll_s):
            try:
                mtime = (self.control / p.REQUEST).stat().st_mtime
                if mtime != self._seen_mtime:
                    self._seen_mtime = mtime
                    self.flag = True
            except OSError:
                pass
            if time.monotonic() - last_beat >= p.heartbeat_s(self.poll_s):
                last_beat = time.monotonic()
                self._write_status()

    def _write_status(self) -> None:
        status = self._status
        if status is None:
            return
        now, step = time.time(), self._steps()
        if status.updated and now > status.updated:
            status.steps_per_s = (step - status.step) / (now - status.updated)
        status.step, status.updated = step, now
        with contextlib.suppress(OSError):
            p.write_json(self._status_path(), status)

    def _registration(self) -> Path:
        return p.registry_root() / f"{self.pid}.json"

    def _status_path(self) -> Path:
        return self.control / f"status-{p.member(self.pid, self.host)}.json"

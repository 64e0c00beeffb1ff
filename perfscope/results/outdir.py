"""The output folder of one analysis: checked before any work, then claimed so no other run writes into it.

    with claim_output_dir(Path("perfscope-out")):   # UserError (exit 2): a file, unwritable, or in use
        ...                                         # this process alone writes results.json here

Design notes: docs/results.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from perfscope.errors import UserError
from perfscope.results.io import check_folder

LOCK_NAME = ".perfscope.lock"
_ATTEMPTS = 10


def check_output_dir(path: str | os.PathLike[str]) -> Path:
    """Refuse an output folder that cannot be used, before any work (raises UserError naming it and why)."""
    text = os.fspath(path)
    if not text.strip():
        raise UserError("--out is empty: name an output folder")
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {text}: is a file, not a folder")
    check_folder(f"--out {text}", out)
    return out


@dataclass
class OutputDirClaim(contextlib.AbstractContextManager["OutputDirClaim"]):
    """This process's hold on an output folder, given back when its with-block is left."""

    path: Path
    fd: int | None
    created: bool

    def __exit__(self, *exc: object) -> None:
        if self.fd is None:
            return
        try:
            (self.path / LOCK_NAME).unlink(missing_ok=True)  # while still locked: a waiting claimer re-checks the inode
        finally:
            os.close(self.fd)
            self.fd = None
        if self.created:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only when empty: a run refused before writing anything leaves nothing


def claim_output_dir(path: str | os.PathLike[str]) -> OutputDirClaim:
    """Check, create if needed, and claim ``path`` for this process; UserError naming the holder if it is taken."""
    out = check_output_dir(path)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from None
    lock = out / LOCK_NAME
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UserError(f"--out {out}: cannot create {LOCK_NAME}: {exc.strerror or exc}") from None
        try:
            holder = _lock(fd)
            if holder is not None:
                raise UserError(f"--out {out} is in use by another perfscope run ({holder}); "
                                "wait for it to finish or choose another --out")
            if _same_file(fd, lock):  # else the holder removed it between our open and our lock: try again
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
                return OutputDirClaim(out, fd, created)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise UserError(f"--out {out}: could not claim the folder (its lock file keeps changing)")


def _lock(fd: int) -> str | None:
    """Take the lock: None when this process now holds it, else who does."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _describe_holder(fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    pid, host = _holder(fd)  # no flock on this filesystem: judge by the recorded pid
    if pid is not None and pid != os.getpid() and host == socket.gethostname() and _alive(pid):
        return _describe_holder(fd)
    return None


def _holder(fd: int) -> tuple[int | None, str | None]:
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
        return (int(text[0]) if text else None), (text[1] if len(text) > 1 else None)
    except (OSError, ValueError):
        return None, None


def _describe_holder(fd: int) -> str:
    pid, host = _holder(fd)
    if pid is None:
        return "pid unknown"
    return f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, theirs = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)

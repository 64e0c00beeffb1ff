"""The one place perfscope writes and reads its files.

Design notes: docs/results.md.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from perfscope.errors import ResultsError, UserError
from perfscope.results.serde import to_jsonable

STDOUT = "-"
"""The path that means standard output."""

_FD_LINK = re.compile(r"^/(?:dev/fd|proc/(?:self|thread-self|\d+)/fd)/(\d+)$")
_STD_LINKS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_MAX_LINK_HOPS = 40


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _descriptor(path: Path) -> int | None:
    """The file descriptor a path names (/dev/stdout, /dev/fd/3, /proc/self/fd/1), following the path's own
    symlinks: writing to the descriptor keeps the shell's redirection (its offset, O_APPEND) intact."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINK_HOPS):
        if current in _STD_LINKS:
            return _STD_LINKS[current]
        match = _FD_LINK.match(current)
        if match:
            pid_part = current.split("/")[2]
            if current.startswith("/proc/") and pid_part not in ("self", "thread-self", str(os.getpid())):
                return None  # another process's descriptor: open the path like any stream
            return int(match.group(1))
        if not os.path.islink(current):
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return None


def _is_stream(path: Path) -> bool:
    """Anything that exists and is not a regular file or a folder: a device, FIFO or socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _destination(raw: str) -> tuple[str, int | Path]:
    """How ``raw`` is written: ("fd", a descriptor), ("stream", a device, FIFO or socket) or ("file", the regular file
    an atomic write replaces); UserError for a path that cannot be written."""
    if not raw.strip():
        raise UserError("output path is empty")
    target = Path(raw)
    if (fd := _descriptor(target)) is not None:
        return "fd", fd
    return ("stream", target) if _is_stream(target) else ("file", _check_file_target(raw, target))


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse an output path that cannot be written, before any work is done (raises UserError).

    Checks what can be known without writing: not empty, not a folder, and for a file that the nearest
    existing folder on its way allows creating files (the atomic write creates a temp file beside it).
    """
    raw = os.fspath(path)
    if raw != STDOUT and (where := _destination(raw))[0] == "stream" and not os.access(where[1], os.W_OK):
        raise UserError(f"{raw}: cannot write: permission denied")


def _check_file_target(text: str, target: Path) -> Path:
    """The regular file an atomic write will replace (a symlink's target), once its folder is known usable."""
    if target.is_dir():
        raise UserError(f"{text}: is a folder, not a file")
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    check_folder(f"{text}: cannot write", target.parent)
    return target


def check_folder(label: str, folder: Path) -> None:
    """UserError (naming ``label``) unless the nearest existing path on the way to ``folder`` is a folder this process
    may create files in."""
    existing = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), Path("."))
    if not existing.is_dir():
        raise UserError(f"{label}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{label}: no permission to create files in {existing}")


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``: standard output, a descriptor or stream as it is, a file atomically."""
    raw = os.fspath(path)
    if raw == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return Path(STDOUT)
    try:
        kind, where = _destination(raw)
        if isinstance(where, int):
            _write_descriptor(where, text)
        elif kind == "stream":
            with open(where, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            _replace_atomically(raw, lambda fh: fh.write(text.encode("utf-8")))
    except OSError as exc:
        raise UserError(f"{raw}: cannot write: {exc.strerror or exc}") from exc
    return Path(raw)


def _write_descriptor(fd: int, text: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream.fileno() == fd:
                stream.write(text)
                stream.flush()
                return
        except (AttributeError, ValueError, OSError):  # a replaced stream (pytest's capture) has no descriptor
            continue
    with os.fdopen(os.dup(fd), "w", encoding="utf-8") as fh:
        fh.write(text)


def _replace_atomically(raw: str, write: Callable[[IO[bytes]], object], doing: str = "write") -> Path:
    """``write`` fills a temp file beside the regular file ``raw`` names; fsync, then one rename puts it in place
    (a reader never sees half a file). UserError naming ``raw`` when it cannot be (``doing``: what failed)."""
    path = _check_file_target(raw, Path(raw))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)  # replacing a file keeps its permissions
        except FileNotFoundError:
            mode = 0o666 & ~_umask()  # mkstemp creates 0600; these files are meant to be read and shared
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UserError(f"{raw}: cannot {doing}: {exc.strerror or exc}") from exc
    return Path(raw)


def write_gzip(path: str | os.PathLike[str], chunks: Iterable[bytes], *, compresslevel: int = 6) -> Path:
    """Gzip a stream of bytes into a regular file, atomically: for artifacts too large to hold as one string
    (a profiler trace). The gzip header names the final file, not the temp file, and has no timestamp."""
    raw = os.fspath(path)
    inner = Path(os.path.realpath(raw)).name.removesuffix(".gz")

    def write(fh: IO[bytes]) -> None:
        with gzip.GzipFile(filename=inner, mode="wb", fileobj=fh, compresslevel=compresslevel, mtime=0) as gz:
            for chunk in chunks:
                gz.write(chunk)

    return _replace_atomically(raw, write)


def copy_file(source: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Copy ``source`` to the regular file ``path`` atomically."""

    def write(fh: IO[bytes]) -> None:
        with open(source, "rb") as src:
            shutil.copyfileobj(src, fh)

    return _replace_atomically(os.fspath(path), write, f"copy {os.fspath(source)}")


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Serialize strictly (no NaN/Infinity) first, then write: a failure leaves the old file intact."""
    return write_text(path, json.dumps(to_jsonable(data), indent=1, allow_nan=False))


def open_log(path: str | os.PathLike[str]) -> IO[bytes]:
    """A child process's stdout/stderr file: a stream written as the child runs, so not atomic by nature."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")  # noqa: SIM115 - the caller hands it to a child process and closes it


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a child's log, for an error message (empty when unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def load_typed(path: str | os.PathLike[str], build: Callable[[Any], Any]) -> Any:
    """``build(read_json(path))``; any ResultsError names the file once (results and baseline files alike)."""
    try:
        return build(read_json(path))
    except ResultsError as exc:
        message = str(exc)
        raise ResultsError(message if message.startswith(f"{path}: ") else f"{path}: {message}") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parsed JSON, or ResultsError naming the file: size, encoding and nesting are checked before parsing,
    so a hostile file is refused in milliseconds instead of exhausting memory or the stack."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            check_size(os.fstat(fh.fileno()).st_size)
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    try:
        return parse_json(data)
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------ before parsing: size, encoding, nesting
# A hostile file is refused before the parser (docs/results.md: the limits).

MAX_FILE_BYTES = 32 * 2**20
"""A long sweep writes a few MB (200,000 step times are 4 MB); 32 MiB leaves a wide margin and bounds the
parse to about a second."""
MAX_DEPTH = 64
"""Results files nest about 10 deep (results > trials > metrics > utilization > samples > ...); free-form
fields (trace facts, declared settings) get the rest."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 1 << 22


def check_size(size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise ResultsError(f"file is {size / 2**20:,.1f} MiB, over the {MAX_FILE_BYTES / 2**20:,.0f} MiB limit for a results file")


def max_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``data`` (strings skipped), computed up to MAX_DEPTH + 1."""
    import numpy as np  # lazily: only readers of files pay for it

    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):
        codes = np.frombuffer(brackets, dtype=np.uint8, count=min(_CHUNK, len(brackets) - start), offset=start)
        steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1).astype(np.int64)
        running = depth + np.cumsum(steps)
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
        if deepest > MAX_DEPTH:
            break
    return deepest


def parse_json(data: bytes) -> Any:
    """Check size, encoding and nesting, then parse. NaN and Infinity are parsed (as floats) so the model's
    validation can reject them naming the field (``trials[0].metrics.mfu: must be finite, got nan``)."""
    check_size(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                           "results files are UTF-8 JSON") from None
    if max_depth(data) > MAX_DEPTH:
        raise ResultsError(f"JSON nested deeper than {MAX_DEPTH} levels; not a results file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer literal longer than Python converts
        raise ResultsError(f"not usable JSON: {str(exc).splitlines()[0][:200]}") from None

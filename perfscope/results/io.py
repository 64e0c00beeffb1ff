"""The one place perfscope writes and reads its files.

    write_text("run/report.md", text)       # atomic: readers see the old file or the new one
    write_json("run/results.json", data)    # strict JSON (no NaN/Infinity), then atomic
    read_json("run/results.json")           # parsed JSON, or ResultsError naming the file and line

Atomic writes are a temp file in the same folder, fsync, rename over the target: a reader (a CI step, a
browser, `perfscope report`) sees the old file or the new one, never half of one, and an interrupted run
never leaves a truncated results.json.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from perfscope.errors import ResultsError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp creates 0600; these files are meant to be read and shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Serialize strictly (no NaN/Infinity) first, then write atomically: a failure leaves the old file intact."""
    from perfscope.results.serde import to_jsonable

    return write_text(path, json.dumps(to_jsonable(data), indent=1, allow_nan=False))


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None

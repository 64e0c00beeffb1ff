"""Where perfscope keeps what it may reuse across runs on one machine (the CPU matmul ceiling, compiled templates).

Design notes: docs/internals.md."""

from __future__ import annotations

import os
from pathlib import Path

DIR_ENV = "PERFSCOPE_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfscope"

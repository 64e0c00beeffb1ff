"""Reading a trial's log back for an error message.

Its own module because both the single-process runner and the torchrun launcher quote logs, and neither should
import the other for it (perfscope.trial.runner starts jobs through perfscope.trial.launch).
"""

from __future__ import annotations

from pathlib import Path


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a trial's log, for an error message (empty when unreadable)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])

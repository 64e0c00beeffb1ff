"""A stored baseline with history: several sessions, each one job's runs and the environment they ran in.

    history = BaselineHistory.load("perfscope-baseline.json")   # a schema-1 baseline loads as one session
    history.sessions[-1].environment.hostname

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.errors import ResultsError
from perfscope.results import Results
from perfscope.results.io import load_typed, write_json

BASELINE_SCHEMA = 2
"""Schema of the baseline file; 1 is a plain results document (one session)."""
KEY = "perfscope_baseline"
DEFAULT_KEEP = 10
"""Sessions `baseline update` keeps: enough to estimate a spread, few enough that old code ages out."""


@dataclass(kw_only=True)
class BaselineHistory:
    """The stored sessions, oldest first."""

    sessions: list[Results] = field(default_factory=list)
    schema: int = BASELINE_SCHEMA

    @property
    def latest(self) -> Results:
        return self.sessions[-1]

    def appended(self, new: list[Results], *, keep: int = DEFAULT_KEEP) -> BaselineHistory:
        """A history with ``new`` sessions added and only the ``keep`` most recent kept."""
        return BaselineHistory(sessions=[*self.sessions, *new][-keep:])

    def to_dict(self) -> dict[str, Any]:
        return {KEY: BASELINE_SCHEMA, "sessions": [s.to_dict() for s in self.sessions]}

    def save(self, path: str | os.PathLike[str]) -> Path:
        return write_json(path, self.to_dict())  # atomic: temp file + rename (results/io.py)

    @classmethod
    def from_dict(cls, data: Any) -> BaselineHistory:
        if not isinstance(data, dict) or KEY not in data:
            return cls(sessions=[Results.from_dict(data)], schema=1)
        version = data.get(KEY)
        if version != BASELINE_SCHEMA:
            raise ResultsError(f"baseline schema {version!r} is not supported (this perfscope reads {BASELINE_SCHEMA})")
        sessions = data.get("sessions")
        if not isinstance(sessions, list) or not sessions:
            raise ResultsError("a baseline must hold a non-empty list 'sessions'")
        out = []
        for i, doc in enumerate(sessions):
            try:
                out.append(Results.from_dict(doc))
            except ResultsError as exc:
                raise ResultsError(f"session {i}: {exc}") from None
        return cls(sessions=out)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BaselineHistory:
        """Read and type a baseline; any problem is a ResultsError (exit 2) naming the file."""
        return load_typed(path, cls.from_dict)

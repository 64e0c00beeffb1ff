"""The baseline a CI gate compares against: its stored sessions of runs (BaselineHistory), each from one results file.

    perfscope baseline save run/results.json                     # -> perfscope-baseline.json, one session
    perfscope baseline update next-job/results.json              # appends a session (keeps the last 10)
    perfscope baseline update run/results.json --replace         # starts the history again

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfscope.check.compat import find_differences
from perfscope.check.metrics import Side
from perfscope.check.sessions import DEFAULT_BETWEEN_SESSION, MIN_SPREAD_DF
from perfscope.errors import UserError
from perfscope.results import Results, ResultsError
from perfscope.results.io import load_typed, write_json
from perfscope.results.messages import Message, msg

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


DEFAULT_BASELINE = Path("perfscope-baseline.json")
Mode = Literal["save", "update", "replace"]


@dataclass(frozen=True, kw_only=True)
class SavedBaseline:
    path: Path
    replaced: bool
    trials: list[str]  # successful runs the gate can compare, of the files just stored
    warnings: list[Message]
    sessions: list[int] = field(default_factory=list)  # usable runs of each stored session, oldest first


def validate_baseline(results: Results, source: str) -> tuple[list[str], list[Message]]:
    """Runs usable as a baseline, and warnings; raises ResultsError when none is usable."""
    usable = [t.name for t in results.trials if t.evidence and t.metrics and t.metrics.steps > 0 and t.metrics.wall_s > 0]
    if not usable:
        raise ResultsError(f"{source}: no successful run with a timed window; not usable as a baseline")
    warnings = []
    if not any(t.configuration == "baseline" for t in results.trials if t.name in usable):
        warnings.append(msg("no_baseline_configuration", usable=usable))
    return usable, warnings


def check_sessions_agree(sessions: list[tuple[Results, str]]) -> None:
    """Refuse a history whose sessions differ in a property that changes throughput (cores, torch, workload ...):
    their spread would be that change, not the noise between sessions of one setup."""
    first, first_source = sessions[0]
    mine = Side(results=first, runs=[t for t in first.trials if t.ok] or first.trials)
    for other, source in sessions[1:]:
        theirs = Side(results=other, runs=[t for t in other.trials if t.ok] or other.trials)
        blocking = [d for d in find_differences(theirs, mine, metric_ids={"samples_per_s"}) if d.blocking]
        if blocking:
            raise UserError(f"{source} cannot join {first_source} in one baseline: " + "; ".join(map(str, blocking))
                            + " (start a new history with `perfscope baseline update --replace`)")


def save_baseline(results_paths: list[str | os.PathLike[str]] | str | os.PathLike[str],
                  to: str | os.PathLike[str] = DEFAULT_BASELINE, *, mode: Mode = "save",
                  keep: int = DEFAULT_KEEP) -> SavedBaseline:
    """Store each results file as one session: ``save`` a new baseline, ``update`` (append, keeping the last
    ``keep`` sessions) or ``replace`` an existing one. Written atomically (results/io.py)."""
    paths = [Path(p) for p in (results_paths if isinstance(results_paths, list) else [results_paths])]
    dest = Path(to)
    if keep < 1:
        raise UserError(f"--keep must be >= 1, got {keep}")
    if any(dest.exists() and dest.resolve() == p.resolve() for p in paths):
        raise UserError(f"{dest} is one of the results files; choose another --to")
    existed = dest.exists()
    if existed and mode == "save":
        raise UserError(f"{dest} exists; use `perfscope baseline update` to add a session, or `--replace`")
    loaded = [(Results.load(p), str(p)) for p in paths]
    usable: list[str] = []
    warnings: list[Message] = []
    for results, source in loaded:
        names, more = validate_baseline(results, source)
        usable += names
        warnings += more
    previous = BaselineHistory.load(dest) if existed and mode == "update" else BaselineHistory()
    history = previous.appended([r for r, _ in loaded], keep=keep)
    stored = [(s, f"{dest} session {i + 1}") for i, s in enumerate(previous.sessions)]
    check_sessions_agree(stored + loaded)
    counts = [sum(1 for t in s.trials if t.evidence and t.metrics and t.metrics.steps > 0) for s in history.sessions]
    if len(history.sessions) < MIN_SPREAD_DF + 1:
        warnings.append(msg("few_sessions", sessions=len(history.sessions), assumed=DEFAULT_BETWEEN_SESSION,
                            needed=MIN_SPREAD_DF + 1))
    if sum(counts) < 3:
        warnings.append(msg("few_baseline_runs", runs=sum(counts)))
    if dest.exists() and mode == "save":  # re-checked after the (slow) loading
        raise UserError(f"{dest} exists; use `perfscope baseline update` to add a session, or `--replace`")
    history.save(dest)
    return SavedBaseline(path=dest, replaced=existed, trials=usable, warnings=warnings, sessions=counts)

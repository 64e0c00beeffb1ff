"""What the sweep measures and how it is set up: a candidate configuration and its runs, the options, and
what the sweep needs from a measurement session.

Design notes: docs/sweep.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from perfscope.errors import UserError
from perfscope.knobs import Knob, knob_ids
from perfscope.results import Gain, Results, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.search.family import FAMILY_ALPHA

BASELINE = "baseline"
DEFAULT_BUDGET_S = 300.0
"""`perfscope analyze`'s budget when none is given (--no-budget: none): five minutes, what a user waits for an answer
(the GPU acceptance's GPT-2 target); a sweep that ends by it recommends what it decided (perfscope.search.decided)."""
JOIN_RUNS = 4
"""Runs a knob's join to the stack usually takes (two pairs): what a budget holds back for each winner."""
CONFIRMATION_RUNS = 6
"""Runs the confirmation usually takes (three pairs): what a budget holds back for it."""


class Measures(Protocol):
    """What the sweep needs from a measurement session (perfscope.trial.session.Session)."""

    results: Results

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None) -> Trial: ...


@dataclass(kw_only=True)
class SweepOptions:
    budget_s: float | None = None
    """Wall seconds for the whole sweep (None: unbounded; each candidate still stops at max_runs)."""
    only: list[str] = field(default_factory=list)
    """Knob ids to try (empty: all)."""
    skip: list[str] = field(default_factory=list)
    """Knob ids not to try."""
    trace_recommended: bool = True
    """Capture a profiler trace for the recommended configuration (exploration runs never capture one)."""
    min_gain: float = 0.02
    """A speed-up below this (2%) is not worth a code change: no extra runs to resolve it, no stacking for it."""
    max_runs: int = 10
    """Runs of one candidate at most (each with its baseline neighbour); why 10: docs/sweep.md."""
    family_alpha: float = FAMILY_ALPHA
    """Family-wise error rate of the sweep's faster/slower verdicts (perfscope.search.family)."""
    order_seed: int | None = None
    """Seed of the baseline/candidate order within each pair (None: drawn per sweep; recorded in the notes)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.only + self.skip) - set(knob_ids()))
        if unknown:
            raise UserError(f"unknown knob id(s) {', '.join(unknown)}; valid ids: {', '.join(knob_ids())}")
        if self.max_runs < 1:
            raise UserError("max_runs must be >= 1")


@dataclass
class Candidate:
    """One measured configuration: a knob's variant (or a stack), and the runs that measured it."""

    knob: Knob
    changes: dict[str, Any]
    """The knob's own changes (without its prerequisite's, when measured on top of one)."""
    name: str
    """The configuration's name; its runs are the trials of that configuration."""
    config: TrialConfig
    knobs: list[str]
    requires: Candidate | None = None
    """The prerequisite candidate this one was measured on top of."""
    notes: list[Message] = field(default_factory=list)
    """What the sweep knows about how it was measured (e.g. the micro-batch it was paired with, and why)."""
    first: Trial | None = None
    gain: Gain | None = None
    rejected: Message | None = None
    """Why the numerics guard rejected its first run (None: it did not)."""
    selection: frozenset[str] = frozenset()
    """Runs that chose this candidate among others (a micro-batch search point): once it has runs of its own
    after them, its gain leaves them out, so the selection's luck (winner's curse) does not inflate it."""

    @property
    def not_applied(self) -> list[Message] | None:
        """Why its run did not run with the knob's own setting (perfscope.trial.loop.not_applied); None when it did."""
        metrics = self.first.metrics if self.first is not None else None
        own = {*self.changes, *(f"knob_settings.{k}" for k in self.changes.get("knob_settings", {}))}
        hits = [why for key, why in (metrics.not_applied.items() if metrics is not None else ()) if key in own]
        return hits or None

    @property
    def usable(self) -> bool:
        return self.first is not None and self.first.ok and self.rejected is None and self.not_applied is None


def run_failed(run: Trial | None) -> Message:
    """Why a run gave no measurement: its status and the first line of its error."""
    if run is None:
        return msg("not_run")
    lines = (run.error or "").strip().splitlines()
    return msg("run_failed", status=run.status, error=lines[0] if lines else None)

"""A stacked configuration that could not be used: said where a reader looks, never a knob quietly missing.

Design notes: docs/sweep.md."""

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import KnobOutcome, Results, Sweep, Trial
from perfscope.results.messages import msg


@dataclass(frozen=True)
class StackFailure:
    """Why the stack ``knobs`` (configuration ``name``) produced no usable run."""

    name: str
    knobs: list[str]
    reason: str
    failed: bool
    """True when its run failed (a crash, OOM, timeout ...), False when it ran but could not be used."""

    @property
    def joining(self) -> str:
        return self.knobs[-1]

    def note(self) -> str:
        what = "failed" if self.failed else "was not usable"
        return (f"the stack {' + '.join(self.knobs)} ({self.name}) {what}: {self.reason}; "
                f"{self.joining} is not in the recommendation, which was measured without it")


def stack_failure(name: str, knobs: list[str], first: Trial | None, rejected: str | None,
                  not_applied: str | None) -> StackFailure | None:
    """The failure of a stack's first run, or None when the run is usable."""
    if first is None:
        return StackFailure(name, knobs, "not run", failed=True)
    if not first.ok:
        line = (first.error or "").strip().splitlines()[0] if (first.error or "").strip() else "no error text recorded"
        return StackFailure(name, knobs, f"{first.status}: {line}", failed=True)
    if rejected is not None:
        return StackFailure(name, knobs, rejected, failed=False)
    if not_applied is not None:
        return StackFailure(name, knobs, f"not applied: {not_applied}", failed=False)
    return None


def record_stack_failure(failure: StackFailure, sweep: Sweep, results: Results) -> None:
    """The note on the sweep, the reason on the joining knob's outcome, and a warning when the run failed."""
    sweep.notes.append(failure.note())
    outcome: KnobOutcome | None = next((o for o in sweep.knobs if o.knob == failure.joining), None)
    if outcome is not None:
        stacked = f"did not join the stack: {failure.name} {'failed' if failure.failed else 'was not usable'} ({failure.reason})"
        outcome.reason = "; ".join(filter(None, [outcome.reason, stacked]))
    if failure.failed:
        results.warnings.append(msg("stack_failed", knobs=list(failure.knobs), reason=failure.reason,
                                    joining=failure.joining, trial=failure.name))

"""Did the run do what its config says? A knob whose trial did not apply it was not measured.

Design notes: docs/measurement.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs import Knob, Observed, active_knobs
from perfscope.knobs.compile import compile_not_applied
from perfscope.results.config import TrialConfig

__all__ = ["Observed", "compile_not_applied", "not_applied", "record"]
"""Observed is defined with the Knob interface (perfscope.knobs.base: `Knob.not_applied` reads it); the trial
fills it in, and these names are the trial's."""


def record(knobs: list[Knob], config: TrialConfig) -> dict[str, Any]:
    """What each of ``knobs`` records for its `Knob.not_applied` at the end of the timed window."""
    return {k.id: value for k in knobs if (value := k.record(config)) is not None}


def not_applied(config: TrialConfig, seen: Observed) -> dict[str, str]:
    """TrialConfig field -> why this run did not run with it (empty: it did everything its config says).

    Each active knob judges its own setting (`Knob.not_applied`), keyed by its first setting (``knob_settings.<id>``
    for a knob with no field); the environment is checked here, whoever set it (a knob or the user)."""
    out: dict[str, str] = {}
    knobs = active_knobs(config)
    for knob in knobs:
        if (why := knob.not_applied(config, seen)) is not None:
            out[knob.settings[0]] = why
    if orphans := sorted(set(config.knob_settings) - {k.id for k in knobs}):
        # A knob registered at run time in the analyze process is unknown to a trial process started afresh.
        out["knob_settings"] = (f"no knob {', '.join(orphans)} is registered in the trial process: its setting was "
                                "not applied (add the knob to perfscope/knobs/__init__.py's REGISTRY)")
    changed = {k: v for k, v in config.env.items() if seen.env.get(k, v) != v}
    if changed:
        out["env"] = "; ".join(f"{k} was {seen.env.get(k)!r} in the trial, not {v!r}: the workload's code set it" for k, v in changed.items())
    return out

"""Did the run do what its config says? A knob whose trial did not apply it was not measured.

    seen = Observed(compiled_graphs=2, matmul_tf32=True, gc_enabled=gc.isenabled(), ...)   # after the timed steps
    metrics.not_applied = not_applied(config, seen)          # {"tf32": "... the workload's code set it back"}

Why: a trial that says "torch.compile" but ran eager, or "TF32 on" while the user's code switched it off in
its loss, measures the baseline twice; its "no significant change" would be reported as a measurement of the
knob. The trial records what it saw at the end of the timed window, the user's code having run every step;
the sweep (perfscope.search.sweep) reports a knob whose own setting is listed here as failed, never as measured.
Compile that compiled nothing is caught earlier still (before the window, `CompileNotApplied`): no point timing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.results.config import TrialConfig
from perfscope.search.knobs import active_knobs
from perfscope.search.knobs.compile import compile_not_applied

__all__ = ["Observed", "compile_not_applied", "not_applied"]


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What the trial process actually ran with, read at the end of the timed window."""

    compiled_graphs: int | None = None
    """Graphs dynamo compiled in this trial (None: not compiling, or dynamo never imported)."""
    matmul_tf32: bool | None = None
    """Matmul TF32 as torch reports it (None: torch cannot tell)."""
    gc_enabled: bool = True
    gc_frozen_objects: int = 0
    """gc.get_freeze_count(): objects in the permanent generation."""
    env: dict[str, str | None] = field(default_factory=dict)
    """The config's environment variables as this process sees them (None: unset)."""
    matmul_flops_by_dtype: dict[str, float] | None = None
    """Matmul FLOPs by input dtype from the structural fingerprint (None: not counted)."""


def not_applied(config: TrialConfig, seen: Observed) -> dict[str, str]:
    """TrialConfig field -> why this run did not run with it (empty: it did everything its config says).

    Each active knob judges its own setting (`Knob.not_applied`), keyed by its first field (``knob_settings`` for a
    knob with none); the environment is checked here, whoever set it (a knob or the user)."""
    out: dict[str, str] = {}
    knobs = active_knobs(config)
    for knob in knobs:
        if (why := knob.not_applied(config, seen)) is not None:
            out[knob.fields[0] if knob.fields else "knob_settings"] = why
    if orphans := sorted(set(config.knob_settings) - {k.id for k in knobs}):
        # A knob registered at run time in the analyze process is unknown to a trial process started afresh.
        out["knob_settings"] = (f"no knob {', '.join(orphans)} is registered in the trial process: its setting was "
                                "not applied (add the knob to perfscope/search/knobs/__init__.py's REGISTRY)")
    changed = {k: v for k, v in config.env.items() if seen.env.get(k, v) != v}
    if changed:
        out["env"] = "; ".join(f"{k} was {seen.env.get(k)!r} in the trial, not {v!r}: the workload's code set it" for k, v in changed.items())
    return out

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


def compile_not_applied(graphs: int | None) -> str | None:
    """Why a compiled trial did not compile (None: it did). Dynamo can enter frames and still compile no graph:
    a backend error under `torch._dynamo.config.suppress_errors` falls back to eager with frames counted."""
    if graphs is None:
        return "torch.compile never ran dynamo (the model was not called through the compiled module)"
    if graphs == 0:
        return "torch.compile compiled no graph (dynamo fell back to eager: a backend error suppressed, or every frame skipped)"
    return None


def not_applied(config: TrialConfig, seen: Observed) -> dict[str, str]:
    """TrialConfig field -> why this run did not run with it (empty: it did everything its config says)."""
    out: dict[str, str] = {}
    if config.compile is not None and (why := compile_not_applied(seen.compiled_graphs)):
        out["compile"] = why
    if config.tf32 is not None and seen.matmul_tf32 is not None and seen.matmul_tf32 != config.tf32:
        out["tf32"] = (f"the trial set matmul TF32 {'on' if config.tf32 else 'off'} but it was "
                       f"{'on' if seen.matmul_tf32 else 'off'} at the end of the timed steps: the workload's code set it back")
    if config.gc_mode == "freeze" and seen.gc_frozen_objects == 0:
        out["gc_mode"] = "gc.freeze() was undone during the timed steps (no frozen objects left: the workload called gc.unfreeze())"
    if config.gc_mode == "disable" and seen.gc_enabled:
        out["gc_mode"] = "the garbage collector was enabled again during the timed steps (the workload called gc.enable())"
    changed = {k: v for k, v in config.env.items() if seen.env.get(k, v) != v}
    if changed:
        out["env"] = "; ".join(f"{k} was {seen.env.get(k)!r} in the trial, not {v!r}: the workload's code set it" for k, v in changed.items())
    dtype = config.precision if config.precision != "fp32" else None  # the autocast dtype, named as the fingerprint names it
    flops = seen.matmul_flops_by_dtype
    if dtype is not None and flops and sum(flops.values()) > 0 and not flops.get(dtype):
        ran = ", ".join(sorted(d for d, v in flops.items() if v))
        out["precision"] = (f"autocast({dtype}) changed no matmul: every matmul ran in {ran} (the workload's forward disables "
                            "autocast or casts its inputs back)")
    return out

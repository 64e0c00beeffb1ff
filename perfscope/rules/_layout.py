"""What the model-parallel rules share: the runs that measured tensor or pipeline parallelism.

A TP or PP run is the baseline itself (the user's loop already splits the model), the sweep's `tensor_parallel` /
`pipeline_parallel` knob runs, or a run of the layout search (perfscope.search.layout); the rules read each one's
`DistributedFacts.parallel` and communication, never measure.
"""

from __future__ import annotations

from perfscope.results import Trial
from perfscope.rules.engine import RuleContext

LAYOUT_KNOBS = ("tensor_parallel", "pipeline_parallel")


def model_parallel_runs(ctx: RuleContext, *, tp: bool = False, pp: bool = False) -> list[Trial]:
    """Successful runs with tensor (``tp``) or pipeline (``pp``) parallelism, the baseline first, each once."""
    names = [ctx.baseline.name]
    for knob in LAYOUT_KNOBS:
        outcome = ctx.knob(knob)
        if outcome is not None and outcome.trial:
            names.append(outcome.trial)
    if ctx.results.layouts is not None:
        names += [r.configuration for r in ctx.results.layouts.rows if r.configuration]
    out: list[Trial] = []
    for name in dict.fromkeys(names):
        trial = ctx.results.trial(name) if name != ctx.baseline.name else ctx.baseline
        if trial is None or not trial.ok or trial.config is None or trial.metrics is None:
            continue
        if (tp and trial.config.tensor_parallel > 1) or (pp and trial.config.pipeline_parallel > 1):
            out.append(trial)
    return out

"""What the parallel rules share: the baseline's distributed facts, and the runs that measured tensor or pipeline
parallelism.

A data-parallel baseline carries `TrialMetrics.distributed` (perfscope.results.distributed); a single-process run
has None there, and every rule that reads it stays silent. A TP or PP run is the baseline itself, the sweep's
`tensor_parallel` / `pipeline_parallel` knob runs, or a run of the layout search (perfscope.search.layout).
"""

from __future__ import annotations

import statistics

from perfscope.results import DistributedFacts, Trial
from perfscope.rules.engine import RuleContext


def distributed_facts(ctx: RuleContext) -> DistributedFacts | None:
    """The baseline's data-parallel facts (None for one process, or a job of one rank)."""
    facts = ctx.metrics.distributed
    return facts if facts is not None and facts.world_size > 1 else None


def median_of_others(facts: DistributedFacts, rank: int) -> tuple[float | None, str]:
    """(median over the other ranks of their compute step, what it is): their no-communication window when every
    one of them ran it, else their full step (which includes the wait for the slow rank: an upper bound)."""
    others = [r for r in facts.ranks if r.rank != rank]
    local = [r.mean_local_step_time_s for r in others]  # compute only: no gradient communication
    if others and all(t is not None for t in local):
        return statistics.median(t for t in local if t is not None), "their step without gradient communication"
    steps = [r.mean_step_time_s for r in others if r.mean_step_time_s is not None]
    return (statistics.median(steps), "their full step (it includes waiting for this rank)") if steps else (None, "")


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

"""What a tensor- or pipeline-parallel run records beyond the data-parallel facts: its layout, plan and bubble.

Design notes: docs/measurement.md."""

from __future__ import annotations

from typing import Any

from perfscope.measure.bubble import Action, imbalance, measured_bubble, replay_bubble, schedule_order, stage_timing
from perfscope.results.config import TrialConfig
from perfscope.results.layout import ParallelFacts, StageTiming, bubble_formula
from perfscope.results.messages import msg
from perfscope.trial.tensor_parallel import derive_plan, model_on_meta

BUBBLE_METHOD = ("per pipeline rank: 1 − (its stages' forward_one_chunk + backward_one_chunk + loss seconds) / "
                 "the schedule's step() wall time, median over the timed window's steps, then the mean over ranks; "
                 "replayed: the schedule's order replayed with each stage's compute per call, immune to load (the "
                 "fastest call: CPU time on CPU, synchronized wall time on CUDA), and free communication; the stages' "
                 "imbalance from the same per-call compute (perfscope.measure.bubble)")


def rank_stage_timing(run: Any, rank: int, config: TrialConfig) -> tuple[StageTiming, dict[str, Any]] | None:
    """This pipeline rank's per-step compute and step time, over the timed window's steps (warm-up steps and the
    trace's later steps left out), and the schedule's action order; None for a rank that runs no pipeline."""
    step = run.step
    if config.pipeline_parallel < 2 or not hasattr(step, "records"):
        return None
    timed = [r for r in step.records if r.in_window] or step.records
    timing = stage_timing(rank, [s.stage_index for s in step.stages], timed)
    # Each stage's load-immune compute per call (a rank's stages are equal shares); the loss is the last stage's.
    per_stage_f = {s.stage_index: timing.forward_call_s for s in step.stages}
    per_stage_b = {s.stage_index: timing.backward_call_s for s in step.stages}
    if step.holds_last:
        last = max(per_stage_f)
        loss = min(r.loss_compute_s if timing.compute_clock != "wall" else r.loss_s for r in timed)
        per_stage_f[last] += loss / config.grad_accum_steps
    order = step.pipeline_order() if config.pipeline_schedule == "interleaved_1f1b" else None
    return timing, {"forward": per_stage_f, "backward": per_stage_b, "order": _plain_order(order)}


def _plain_order(order: dict[int, list[Any]] | None) -> dict[int, list[tuple[int, str, int]]] | None:
    """The schedule's actions as (stage, "F" | "B", micro-batch), picklable for the gather."""
    if order is None:
        return None
    out: dict[int, list[tuple[int, str, int]]] = {}
    for rank, actions in order.items():
        out[rank] = []
        for a in actions:
            if a is None or a.microbatch_index is None:
                continue
            kind = getattr(a.computation_type, "value", str(a.computation_type))
            if kind in ("F", "B"):
                out[rank].append((int(a.stage_index), kind, int(a.microbatch_index)))
    return out


def parallel_facts(config: TrialConfig, workload: Any, gathered: list[Any]) -> ParallelFacts:
    """The job's layout facts on rank 0, from every rank's `rank_stage_timing` (None entries for TP ranks)."""
    facts = ParallelFacts(data_parallel=config.data_parallel_size, tensor_parallel=config.tensor_parallel,
                          pipeline_parallel=config.pipeline_parallel)
    if config.tensor_parallel > 1:
        plan = derive_plan(model_on_meta(workload), config.tensor_parallel, workload)  # the plan every rank applied
        facts.tp_plan, facts.tp_plan_source = plan.styles, plan.source
    if config.pipeline_parallel < 2:
        return facts
    facts.schedule = config.pipeline_schedule
    facts.microbatches = config.grad_accum_steps
    virtual = 2 if config.pipeline_schedule == "interleaved_1f1b" else 1
    facts.bubble_formula = bubble_formula(config.pipeline_parallel, config.grad_accum_steps, virtual)
    entries = [g for g in gathered if g is not None]
    facts.stages = [timing for timing, _ in entries]
    facts.bubble_measured = measured_bubble(facts.stages)
    facts.bubble_method = BUBBLE_METHOD
    forward = {k: v for _, extra in entries for k, v in extra["forward"].items()}
    backward = {k: v for _, extra in entries for k, v in extra["backward"].items()}
    facts.stage_imbalance = imbalance([sum(forward[s] + backward[s] for s in t.stages) for t in facts.stages])
    try:
        if config.pipeline_schedule == "interleaved_1f1b":  # the multi-stage runtime's order is the one it executes
            order = next((extra["order"] for _, extra in entries if extra["order"]), None)
            if order is None:
                facts.unavailable["bubble_replayed"] = msg("no_pipeline_order")
                return facts
            actions = {int(r): [Action(*a) for a in acts] for r, acts in order.items()}
        else:
            actions = schedule_order(config.pipeline_schedule, config.pipeline_parallel, config.grad_accum_steps)
        facts.bubble_replayed = replay_bubble(actions, forward, backward)
    except (ValueError, KeyError) as exc:
        facts.unavailable["bubble_replayed"] = msg("replay_failed", error=str(exc))
    return facts

"""The layout search: for a world size, every (dp, tp, pp, micro-batch, checkpointing) layout, pruned by a memory
and applicability model, the survivors measured as short trials and ranked by measured throughput per rank.

Design notes: docs/distributed.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfscope.results import LayoutRow, LayoutTable, ModelFacts, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.layout import bubble_formula
from perfscope.results.messages import Message, msg
from perfscope.search.candidate import run_failed

MAX_BUBBLE = 0.25
"""A pipeline idle more than a quarter of the step by the formula is pruned (its m is too small)."""
FIT_SHARE = 0.9
"""The state may take this share of a rank's memory: the rest is activations, temporaries and the runtime."""


@dataclass
class Candidate:
    row: LayoutRow
    config: TrialConfig | None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layout_name(dp: int, tp: int, pp: int, schedule: str | None, m: int, ckpt: bool) -> str:
    parts = [f"dp{dp}"] if dp > 1 else []
    parts += [f"tp{tp}"] if tp > 1 else []
    parts += [f"pp{pp} {schedule} m{m}"] if pp > 1 else []
    return " × ".join(parts or ["dp1"]) + (" + ckpt" if ckpt else "")


def state_per_rank(model: ModelFacts, bytes_per_parameter: float, dp: int, tp: int, pp: int, sharded: bool) -> int:
    """Modelled parameters + gradients + optimizer state of the rank holding the most (see the module docstring)."""
    total = model.parameter_count
    layout = model.layout
    params = float(total)
    if tp > 1 and layout is not None:
        params = layout.tp_parameter_count / tp + (total - layout.tp_parameter_count)
    if pp > 1 and layout is not None:
        params = layout.block_parameter_count / pp + (total - layout.block_parameter_count)
    if sharded and dp > 1:
        params /= dp
    return int(params * bytes_per_parameter)


def _inapplicable(model: ModelFacts, dp: int, tp: int, pp: int, nproc_per_node: int) -> tuple[str, Message] | None:
    layout = model.layout
    if tp > 1 and pp > 1:
        return "inapplicable", msg("layout_3d")
    if pp > 1 and dp > 1:
        return "inapplicable", msg("layout_dp_pp")
    if (tp > 1 or pp > 1) and layout is None:
        return "inapplicable", msg("layout_split_unknown")
    if tp > 1 and layout is not None and str(tp) in layout.tp_inapplicable:
        return "inapplicable", msg("layout_tp_inapplicable", why=layout.tp_inapplicable[str(tp)])
    if tp > 1 and layout is not None and not layout.tp_parameter_count:
        return "inapplicable", msg("layout_no_tp_plan", tp=tp)
    if pp > 1 and layout is not None and (layout.blocks < pp or layout.blocks % pp):
        return "inapplicable", msg("layout_layers_indivisible", layers=layout.blocks, pp=pp)
    if tp > nproc_per_node:
        return "communication bound", msg("layout_tp_spans_nodes", tp=tp, per_node=nproc_per_node)
    return None


def layout_candidates(base: TrialConfig, model: ModelFacts, *, bytes_per_parameter: float,
                      memory_limit: int | None, wraps_model: bool = False) -> list[Candidate]:
    """Every layout of the world size at the user's global batch, each a row: pruned (with the reason) or to measure."""
    world, batch = base.world_size, base.global_batch
    out: list[Candidate] = []
    for tp in _divisors(world):
        for pp in _divisors(world // tp):
            dp = world // (tp * pp)
            schedules: list[tuple[str | None, int]] = [(None, base.grad_accum_steps)]
            if pp > 1:
                blocks = model.layout.blocks if model.layout else 0
                kinds = ("gpipe", "1f1b", "interleaved_1f1b") if blocks and blocks % (2 * pp) == 0 else ("gpipe", "1f1b")
                schedules = [(s, m) for m in (pp, 2 * pp, 4 * pp) for s in kinds if batch % m == 0]
            for schedule, m in schedules:
                for ckpt in (False, True):
                    out.append(_candidate(base, model, dp, tp, pp, schedule, m, ckpt, bytes_per_parameter,
                                          memory_limit, wraps_model))
    return out


def _candidate(base: TrialConfig, model: ModelFacts, dp: int, tp: int, pp: int, schedule: str | None, m: int,
               ckpt: bool, bytes_per_parameter: float, memory_limit: int | None, wraps_model: bool) -> Candidate:
    replica_batch = base.global_batch // dp
    mb = replica_batch // m if pp > 1 else replica_batch // base.grad_accum_steps
    row = LayoutRow(layout=layout_name(dp, tp, pp, schedule, m, ckpt), data_parallel=dp, tensor_parallel=tp,
                    pipeline_parallel=pp, micro_batch_size=max(mb, 1), microbatches=m, activation_checkpointing=ckpt)
    sharded = tp > 1 and dp > 1  # 2-D: FSDP2 across the replicas
    row.memory_per_rank_bytes = state_per_rank(model, bytes_per_parameter, dp, tp, pp, sharded)
    if pp > 1:
        row.bubble_formula = bubble_formula(pp, m, 2 if schedule == "interleaved_1f1b" else 1)

    def pruned(category: Any, reason: Message) -> Candidate:
        row.status, row.prune_reason, row.reason = "pruned", category, reason
        return Candidate(row, None)

    if wraps_model and (tp > 1 or pp > 1 or dp != base.world_size):
        return pruned("inapplicable", msg("layout_wraps_model"))
    if (why := _inapplicable(model, dp, tp, pp, base.nproc_per_node)) is not None:
        return pruned(*why)
    if mb < 1 or (pp > 1 and replica_batch % m):
        return pruned("inapplicable", msg("layout_batch_indivisible", batch=replica_batch, microbatches=m))
    if memory_limit is not None and row.memory_per_rank_bytes > FIT_SHARE * memory_limit:
        return pruned("would not fit", msg("layout_would_not_fit", state=row.memory_per_rank_bytes, limit=memory_limit,
                                           share=FIT_SHARE))
    if row.bubble_formula is not None and row.bubble_formula > MAX_BUBBLE:
        return pruned("bubble", msg("layout_bubble", bubble=row.bubble_formula, microbatches=m, limit=MAX_BUBBLE))
    if ckpt and pp > 1:
        return pruned("inapplicable", msg("layout_pipeline_no_checkpointing"))
    if ckpt:
        return pruned("not needed", msg("layout_checkpointing_not_needed"))
    return Candidate(row, layout_config(base, dp, tp, pp, schedule, m, mb, ckpt))


def layout_config(base: TrialConfig, dp: int, tp: int, pp: int, schedule: str | None, m: int, mb: int,
                  ckpt: bool) -> TrialConfig:
    """The trial that measures a layout: the baseline's settings, the layout's wrapper and micro-batches."""
    changes: dict[str, Any] = {"tensor_parallel": tp, "pipeline_parallel": pp, "micro_batch_size": mb,
                               "activation_checkpointing": ckpt}
    if tp > 1 or pp > 1:
        changes.update(data_parallel="fsdp" if dp > 1 else "none", no_sync=False, bucket_cap_mb=None,
                       gradient_as_bucket_view=False, static_graph=False, comm_hook=None, fsdp_mixed_precision=None)
    if pp > 1:
        changes.update(grad_accum_steps=m, pipeline_schedule=schedule)
    return base.replace(**changes)


def fill_measured(row: LayoutRow, trial: Trial, world: int, traced: Trial | None = None) -> None:
    """A layout row's figures from the trial that measured it (throughput per rank = the job's / world size); the
    communication from ``traced`` (a traced run of the same configuration) when this run has no trace."""
    row.configuration = trial.configuration
    m = trial.metrics
    if not trial.ok or m is None:
        row.status, row.reason = "failed", run_failed(trial)
        return
    row.status = "measured"
    if trial.excluded:
        row.reason = msg("layout_under_load", load=trial.excluded)
    row.samples_per_s = m.samples_per_s
    row.samples_per_s_per_rank = m.samples_per_s / world if m.samples_per_s is not None else None
    row.peak_memory_bytes = m.peak_memory_bytes
    facts = m.distributed
    if facts is None:
        return
    states = [(r.parameter_bytes or 0) + (r.gradient_bytes or 0) + (r.optimizer_state_bytes or 0) for r in facts.ranks]
    row.measured_state_bytes = max(states) if states else None
    comm = facts.communication
    if comm is None and traced is not None and traced.metrics is not None and traced.metrics.distributed is not None:
        comm = traced.metrics.distributed.communication  # the same configuration's traced run
    if comm is not None:
        row.collective_s_per_step = comm.collective_s
        row.exposed_collective_s_per_step = comm.exposed_collective_s
    if facts.parallel is not None and facts.parallel.bubble_measured is not None:
        row.bubble = facts.parallel.bubble_measured


def _memory_limit(results: Any, base: TrialConfig, baseline: Trial) -> int | None:
    env = results.environment
    if base.device == "cuda":
        return (baseline.metrics.device_memory_capacity_bytes if baseline.metrics else None) or env.device_memory_bytes
    return env.host_memory_bytes // base.nproc_per_node if env.host_memory_bytes else None


def _bytes_per_parameter(baseline: Trial, model: ModelFacts) -> float:
    """The baseline's own: its largest rank's parameters + gradients + optimizer state per parameter (a DDP or
    ZeRO-1 baseline holds a whole replica of the first two; FSDP2's shards are summed back)."""
    facts = baseline.metrics.distributed if baseline.metrics else None
    if facts is None or not facts.ranks or not model.parameter_count:
        return 16.0  # fp32 AdamW: 4 + 4 + 8
    sharded = {"parameter_bytes": ("fsdp",), "gradient_bytes": ("fsdp",), "optimizer_state_bytes": ("fsdp", "zero1")}
    held = sum((sum if facts.data_parallel in by else max)(getattr(r, what) or 0 for r in facts.ranks)
               for what, by in sharded.items())
    return held / model.parameter_count or 16.0


def run_layout_search(session: Any, workload: Any, base: TrialConfig, *, max_trials: int = 8,
                      not_measuring: str | None = None) -> LayoutTable | None:
    """Prune, measure the survivors (reusing a run of the same configuration the sweep already made), rank.

    ``not_measuring``: why no new run may start (the analysis was interrupted): the table is built from the runs
    already made (the sweep measures tensor_parallel and pipeline_parallel itself) and every other survivor says why
    it was not measured, so a Ctrl-C still reports the layouts that were measured."""
    results = session.results
    model = results.workload.model
    # Any successful baseline run, contended ones included: it gives the state's bytes per parameter, not a speed.
    baseline = next((t for t in results.ok_trials() if t.configuration == "baseline"), None)
    if model is None or baseline is None or base.world_size < 2:
        why = ("the probe did not describe the model" if model is None else
               "no baseline run succeeded" if baseline is None else "one process")
        results.notes.append(msg("layout_search_not_run", why=why))
        return None
    base = base.replace(capture_trace=True)
    limit = _memory_limit(results, base, baseline)
    table = LayoutTable(world_size=base.world_size, memory_limit_bytes=limit, method=(
        "each layout at the user's global batch; throughput per rank = the job's samples/s (all replicas' samples over "
        "the slowest rank's window) / world size; memory: modelled state per rank (perfscope.search.layout), and the "
        "largest rank's state counted from its tensors where measured"))
    cands = layout_candidates(base, model, bytes_per_parameter=_bytes_per_parameter(baseline, model),
                              memory_limit=limit, wraps_model=workload.wraps_model)
    measured = 0
    for cand in cands:
        table.rows.append(cand.row)
        if cand.config is None:
            continue
        trial = _existing(results, cand.config)
        if trial is None:
            if not_measuring is not None:
                cand.row.status, cand.row.reason = "pruned", msg("layout_not_measured", why=not_measuring)
                continue
            if measured >= max_trials:
                cand.row.status, cand.row.reason = "pruned", msg("layout_trial_limit")
                continue
            name = "layout-" + cand.row.layout.replace(" × ", "-").replace(" + ", "-").replace(" ", "-")
            trial = session.measure(name, cand.config, ["layout"])
            measured += 1
        fill_measured(cand.row, trial, base.world_size, _traced_run(results, trial.configuration))
    table.rows.sort(key=lambda r: (r.status != "measured", -(r.samples_per_s_per_rank or 0.0)))
    results.layouts = table
    session.save()
    return table


def _existing(results: Any, config: TrialConfig) -> Trial | None:
    """The median-throughput run of exactly this configuration (trace capture aside) that the baseline or the sweep
    already made (uncontended runs when there are any); None when there is none."""
    want = config.replace(capture_trace=False)
    runs = [t for t in results.ok_trials() if t.config is not None and t.config.replace(capture_trace=False) == want
            and t.metrics is not None and t.metrics.samples_per_s is not None]
    quiet = [t for t in runs if not t.excluded] or runs
    if not quiet:
        return None
    ordered = sorted(quiet, key=lambda t: t.metrics.samples_per_s)  # type: ignore[union-attr]
    return ordered[(len(ordered) - 1) // 2]


def _traced_run(results: Any, configuration: str) -> Trial | None:
    """A run of the configuration whose trace gave its communication (the sweep traces a knob's first run only)."""
    return next((t for t in results.ok_trials() if t.configuration == configuration and t.metrics is not None
                 and t.metrics.distributed is not None and t.metrics.distributed.communication is not None), None)

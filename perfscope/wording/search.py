"""The words of the search's reasons (perfscope.wording's templates, split off to keep one concept a module): why a
knob was measured, skipped or rejected (KnobOutcome.reason), the numerics guard's verdict (NumericsCheck) and why a
layout was pruned or how it was measured (LayoutRow.reason).

    words(msg("fastest_of_variants", count=2, tried=["1", "2"]))   # perfscope.wording.words: WORDING holds these
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.stats import confidence_text
from perfscope.wording._text import join_parts


def _run_failed(*, status: str, error: str | None = None) -> str:
    return f"{status}: {error or 'no error text recorded'}"


def _cannot_tell(*, confidence: float, low: float, high: float | None, runs: int, mde: float | None = None) -> str:
    """``high``: None once saved when the interval is unbounded (JSON has no Infinity)."""
    detects = f"; these {runs} run(s) detect changes of about {mde:.0%} or more" if mde is not None else ""
    upper = f"{high:.2f}" if high is not None else "inf"
    return f"cannot tell at this machine's noise level ({confidence_text(confidence)} interval {low:.2f}–{upper}{detects})"


def _numerics_steps(*, first: int, last: int, global_steps: bool = True, samples_per_step: int | None = None) -> str:
    """"global steps 2–9 (samples 64–319 of the data stream, after the same updates)"."""
    span = f"{first}–{last}" if last > first else f"{first}"
    if not global_steps:
        return f"measured steps {span} (global steps not recorded by the perfscope that ran them)"
    steps = f"global step{'s' if last > first else ''} {span}"
    if samples_per_step:
        return (f"{steps} (samples {first * samples_per_step}–{(last + 1) * samples_per_step - 1} of the data stream, "
                "after the same updates)")
    return f"{steps} (after the same number of updates; other samples per step)"


def _numerics_within(*, method: str, steps: str, diff: float | None, tolerance: float) -> str:
    what = "losses at" if method == "step by step" else "mean loss over"
    within = f"within {diff:.1%}" if diff is not None else "compared"
    return f"numerics guard: {what} {steps} {within} of the baseline's (tolerance {tolerance:.0%})"


def _step_loss(*, step: int, global_steps: bool, loss: float, baseline: float, diff: float, tolerance: float) -> str:
    return (f"loss at {'global' if global_steps else 'measured'} step {step} is {loss:.4g} vs baseline {baseline:.4g} "
            f"({diff:.1%} apart; tolerance {tolerance:.0%})")


def _tf32_set_back(*, trial: bool, ran: bool) -> str:
    return (f"the trial set matmul TF32 {'on' if trial else 'off'} but it was {'on' if ran else 'off'} at the end of "
            "the timed steps: the workload's code set it back")


def _env_set_back(*, changed: dict[str, list[str | None]]) -> str:
    """``changed``: variable -> [its value in the trial, the value the config set]."""
    return "; ".join(f"{k} was {seen!r} in the trial, not {wanted!r}: the workload's code set it"
                     for k, (seen, wanted) in changed.items())


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


SEARCH: dict[str, str | Callable[..., Any]] = {
    # why a knob was skipped, failed, rejected, or how it was measured (KnobOutcome.reason)
    "knob_not_selected": "not selected (--only)",
    "knob_skipped": "skipped (--skip)",
    "knob_inapplicable": "{why}",  # the knob's own words (Knob.applies)
    "knob_note": "{note}",  # the knob's own words about a run of it (Knob.measured_notes)
    "not_run": "not run",
    "run_failed": _run_failed,
    "knob_not_applied": lambda *, why: f"not applied: {join_parts(why)}; the run did not measure this knob",
    "measured_on_top": "measured on top of {reference}: {ratio:.2f}× over it ({both:.2f}× over the baseline with both)",
    "paired_micro_batch": "paired with micro-batch {micro} (without it: fits up to {largest}, out of memory at {oom})",
    "recipe_not_stacked": "it changes the training recipe: reported, never stacked into the recommendation",
    "cannot_tell": _cannot_tell,
    "micro_batch_already_fastest": "the user's micro-batch is already the fastest",
    "needs_prerequisite": "needs {prerequisite}, which produced no acceptable run to build on",
    "memory_not_limiting": "memory did not limit the micro-batch (fits up to {largest}): {title} would only add {cost}",
    "needs_micro_batch_search": "needs the micro-batch search, which did not run",
    "sweep_stopped": "{why}",  # Sweep.stopped_early, worded
    # why the sweep stopped before its end (Sweep.stopped_early)
    "budget_of_exhausted": "budget of {budget_s:g} s exhausted",
    "stopped_by_user": "stopped by the user (Ctrl-C or SIGTERM)",
    "sweep_stopped_early": "the sweep stopped early",
    "lanes_aa_all_dropped": "every lane failed or was dropped in the A/A check",
    "lanes_all_lost": lambda *, dropped: "every lane was lost: " + "; ".join(
        f"lane {lane}: {why}" for lane, why in dropped.items()),
    "lane_aa_outlier": ("A/A outlier: its baseline ran at {level:.2f}× the median lane's (the limit is {limit:.2f}×): "
                        "dropped before the sweep"),
    "lanes_fix_numa": "the lanes fix each run's cores, NUMA node by node",
    "budget_reserved": ("budget: its last {runs} run(s) went to the stacking and the confirmation (this knob could only "
                        "be reported, not recommended)"),
    "budget_exhausted": "budget exhausted",
    "fastest_of_variants": lambda *, count, tried: (
        f"the fastest of {count} variants ({', '.join(tried)}): its gain is the selected variant's, which may overstate "
        "the true gain (winner's curse)"),
    "not_reached": "not reached: the sweep was {why}",
    "did_not_join_stack": lambda *, name, failed, reason: (
        f"did not join the stack: {name} {'failed' if failed else 'was not usable'} ({reason})"),
    "stack_not_applied": lambda *, why: f"not applied: {join_parts(why)}",
    # why a run did not run with a setting of its config (TrialMetrics.not_applied; Knob.not_applied)
    "tf32_set_back": _tf32_set_back,
    "autocast_no_matmul": lambda *, dtype, ran: (
        f"autocast({dtype}) changed no matmul: every matmul ran in {', '.join(ran)} (the workload's forward disables "
        "autocast or casts its inputs back)"),
    "gc_freeze_undone": ("gc.freeze() was undone during the timed steps (no frozen objects left: the workload called "
                         "gc.unfreeze())"),
    "gc_enabled_again": ("the garbage collector was enabled again during the timed steps (the workload called "
                         "gc.enable())"),
    "compile_no_dynamo": "torch.compile never ran dynamo (the model was not called through the compiled module)",
    "compile_no_graph": ("torch.compile compiled no graph (dynamo fell back to eager: a backend error suppressed, or "
                         "every frame skipped)"),
    "knob_unregistered": lambda *, knobs: (
        f"no knob {', '.join(knobs)} is registered in the trial process: its setting was not applied (add the knob to "
        "perfscope/knobs/__init__.py's REGISTRY)"),
    "env_set_back": _env_set_back,
    "knob_set_back": "{why}",  # a knob's own words (the Knob.not_applied of a knob registered outside perfscope)
    # why the micro-batch search stopped (perfscope.search.microbatch)
    "micro_batch_ended": "micro-batch {micro} ended {status}",
    "micro_batch_memory_margin": "micro-batch {micro} uses more than {margin:.0%} of device memory",
    "micro_batch_plateau": "throughput stopped improving at micro-batch {micro}",
    "micro_batch_cap": "reached the search cap ({factor}× the starting micro-batch)",
    # the numerics guard (perfscope.search.numerics; NumericsCheck)
    "numerics_guard": "numerics guard: {reason}",
    "numerics_rejected": "numerics guard: {reason}; compared {steps}",
    "numerics_within": _numerics_within,
    "numerics_steps": _numerics_steps,
    "numerics_no_losses": "no losses to compare",
    "numerics_nonfinite": "the loss became non-finite (inf/NaN): overflow or a broken configuration",
    "numerics_step_loss": _step_loss,
    "numerics_grad_norm": "first-step gradient norm {norm:.4g} vs baseline {baseline:.4g} (tolerance {tolerance:.0%})",
    "numerics_mean_loss": ("mean loss {loss:.4g} vs baseline {baseline:.4g} ({diff:.1%} apart; tolerance {tolerance:.0%} "
                           "for a different micro-batch/accumulation)"),
    "numerics_accumulation_grad_norm": ("first-step gradient norm {norm:.4g} vs baseline {baseline:.4g} with the same "
                                        "global batch (tolerance {tolerance:.0%}): is the loss divided by the "
                                        "accumulation steps?"),
    "numerics_recipe_loss": ("with {optimizer} the mean loss over the compared steps is {loss:.4g} vs baseline "
                             "{baseline:.4g} ({diff:.1%} higher; tolerance {tolerance:.0%}): it trains slower at this "
                             "learning rate"),
    "numerics_recipe_grad_norm": ("first-step gradient norm {norm:.4g} vs baseline {baseline:.4g} (tolerance "
                                  "{tolerance:.0%}): it is taken before any optimizer step, so the model or the loss "
                                  "differs, not just the optimizer"),
    # why a layout was pruned, or how it was measured (perfscope.search.layout; LayoutRow.reason)
    "layout_3d": "TP × PP together (3-D) is not run by perfscope",
    "layout_dp_pp": "pipeline stages replicated across data-parallel ranks (DP × PP) are not run by perfscope",
    "layout_split_unknown": "the probe could not read how the model splits",
    "layout_tp_inapplicable": "{why}",  # ModelLayout.tp_inapplicable's message, worded
    # why no correct TP plan exists for a model and degree (perfscope.trial.tensor_parallel; TpPlan.reason)
    "tp_unknown_styles": lambda *, bad, styles: (
        f"Workload.tensor_parallel_plan: unknown style(s) {bad}; use one of {tuple(styles)}"),
    "tp_no_repeated_blocks": "no repeated blocks (an nn.ModuleList of same-type layers) to split",
    "tp_heads_indivisible": "{attr} = {heads} heads is not divisible by tp = {tp}",
    "tp_packed_qkv": ("packed q/k/v projection '{name}' ({fan_in} → {fan_out}): its rows are [q; k; v], so a column "
                      "split would give rank 0 all of q and half of k; use separate q/k/v Linears or give "
                      "Workload.tensor_parallel_plan"),
    "tp_no_projections": ("no attention (q/k/v + output) or MLP (up + down) projections recognised in the repeated "
                          "block {block}; give Workload.tensor_parallel_plan"),
    "tp_features_indivisible": "'{name}' has {width} features to split, not divisible by tp = {tp}",
    "tp_head_features_indivisible": lambda *, name, width, head_dim, tp: (
        f"'{name}': {width} features = {width // head_dim} heads of {head_dim}, not divisible by tp = {tp}"),
    "layout_no_tp_plan": "no TP plan was derived for tp = {tp}",
    "layout_layers_indivisible": "{layers} layers are not divisible by pp = {pp}",
    "layout_tp_spans_nodes": ("tp = {tp} spans nodes ({per_node} ranks per node): a TP all-reduce per block in forward "
                              "and backward on the inter-node network"),
    "layout_wraps_model": "the workload wraps its own model (Workload.wraps_model=True)",
    "layout_batch_indivisible": "the replica's batch {batch} does not split into {microbatches} micro-batches",
    "layout_would_not_fit": lambda *, state, limit, share: (
        f"{_gib(state)} of training state per rank, more than {share:.0%} of the {_gib(limit)} a rank may hold"),
    "layout_bubble": ("(p − 1) / (m + p − 1) = {bubble:.0%} idle with {microbatches} micro-batches (above {limit:.0%}); "
                      "the same pipeline with more micro-batches is measured"),
    "layout_pipeline_no_checkpointing": "pipeline trials run without activation checkpointing",
    "layout_checkpointing_not_needed": ("the state fits without it: checkpointing would only add recompute (measured "
                                        "only where the same layout runs out of memory)"),
    "layout_not_measured": "not measured: {why}",
    "layout_trial_limit": "not measured: the layout search's trial limit was reached",
    "layout_under_load": "measured under load ({load}): compare with care",
}

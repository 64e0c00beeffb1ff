"""The words of the search"s reasons and the FLOP count"s notes (perfscope.wording.search, perfscope.wording): one
case per template, so a template's words change only on purpose; tests elsewhere assert codes."""

from __future__ import annotations

import pytest

from perfscope.results.messages import Message, msg
from perfscope.wording import words
from perfscope.wording.search import SEARCH

GiB = 2**30
steps = msg("numerics_steps", first=2, last=7, global_steps=True, samples_per_step=16)
FLOP_NOTES = {"cpu_sdpa_formula", "attention_recompute_excluded", "no_matmul_counted", "flops_tp_share",
              "flops_checkpointing", "flops_pipeline_share", "flops_scaled", "flops_counted_again",
              "flops_counted_in_loop"}

CASES: list[tuple[Message, str]] = [
    (msg("knob_not_selected"),
     "not selected (--only)"),
    (msg("knob_skipped"),
     "skipped (--skip)"),
    (msg("knob_inapplicable", why="the model already uses SDPA"),
     "the model already uses SDPA"),
    (msg("knob_note", note="host↔device copy traffic unknown"),
     "host↔device copy traffic unknown"),
    (msg("not_run"),
     "not run"),
    (msg("run_failed", status="crashed", error="RuntimeError: boom"),
     "crashed: RuntimeError: boom"),
    (msg("run_failed", status="timeout", error=None),
     "timeout: no error text recorded"),
    (msg("knob_not_applied", why="torch.compile compiled no graph"),
     "not applied: torch.compile compiled no graph; the run did not measure this knob"),
    (msg("measured_on_top", reference="dataloader_workers", ratio=1.2, both=1.56),
     "measured on top of dataloader_workers: 1.20× over it (1.56× over the baseline with both)"),
    (msg("paired_micro_batch", micro=64, largest=32, oom=48),
     "paired with micro-batch 64 (without it: fits up to 32, out of memory at 48)"),
    (msg("recipe_not_stacked"),
     "it changes the training recipe: reported, never stacked into the recommendation"),
    (msg("cannot_tell", confidence=0.95, low=0.97, high=1.04, runs=3, mde=0.05),
     (
      "cannot tell at this machine's noise level (95% interval 0.97–1.04; these 3 run(s) detect changes of "
      "about 5% or more)")),
    (msg("cannot_tell", confidence=0.95, low=0.9, high=None, runs=1),
     "cannot tell at this machine's noise level (95% interval 0.90–inf)"),
    (msg("micro_batch_already_fastest"),
     "the user's micro-batch is already the fastest"),
    (msg("needs_prerequisite", prerequisite="dataloader_workers"),
     "needs dataloader_workers, which produced no acceptable run to build on"),
    (msg("memory_not_limiting", largest=64, title="activation offloading", cost="host↔device copies"),
     "memory did not limit the micro-batch (fits up to 64): activation offloading would only add host↔device copies"),
    (msg("needs_micro_batch_search"),
     "needs the micro-batch search, which did not run"),
    (msg("sweep_stopped", why=msg("budget_of_exhausted", budget_s=300.0)),
     "budget of 300 s exhausted"),
    (msg("budget_of_exhausted", budget_s=1.5),
     "budget of 1.5 s exhausted"),
    (msg("stopped_by_user"),
     "stopped by the user (Ctrl-C or SIGTERM)"),
    (msg("sweep_stopped_early"),
     "the sweep stopped early"),
    (msg("lanes_aa_all_dropped"),
     "every lane failed or was dropped in the A/A check"),
    (msg("lanes_all_lost", dropped={"0": "slurm job 12 CANCELLED before its trial finished", "1": "ray task died"}),
     "every lane was lost: lane 0: slurm job 12 CANCELLED before its trial finished; lane 1: ray task died"),
    (msg("budget_reserved", runs=6),
     (
      "budget: its last 6 run(s) went to the stacking and the confirmation (this knob could only be "
      "reported, not recommended)")),
    (msg("budget_exhausted"),
     "budget exhausted"),
    (msg("fastest_of_variants", count=2, tried=["2 workers", "4 workers"]),
     (
      "the fastest of 2 variants (2 workers, 4 workers): its gain is the selected variant's, which may "
      "overstate the true gain (winner's curse)")),
    (msg("not_reached", why=msg("stopped_by_user")),
     "not reached: the sweep was stopped by the user (Ctrl-C or SIGTERM)"),
    (msg("did_not_join_stack", name="stack2-compile", failed=True,
         reason=msg("run_failed", status="crashed", error="E")),
     (
      "did not join the stack: stack2-compile failed (crashed: E)")),
    (msg("stack_not_applied", why="autocast off"),
     "not applied: autocast off"),
    (msg("stack_not_applied", why=[msg("compile_no_dynamo"), msg("gc_enabled_again")]),
     ("not applied: torch.compile never ran dynamo (the model was not called through the compiled module); the "
      "garbage collector was enabled again during the timed steps (the workload called gc.enable())")),
    (msg("tf32_set_back", trial=True, ran=False),
     "the trial set matmul TF32 on but it was off at the end of the timed steps: the workload's code set it back"),
    (msg("autocast_no_matmul", dtype="bf16", ran=["fp16", "fp32"]),
     ("autocast(bf16) changed no matmul: every matmul ran in fp16, fp32 (the workload's forward disables autocast or "
      "casts its inputs back)")),
    (msg("gc_freeze_undone"),
     "gc.freeze() was undone during the timed steps (no frozen objects left: the workload called gc.unfreeze())"),
    (msg("gc_enabled_again"),
     "the garbage collector was enabled again during the timed steps (the workload called gc.enable())"),
    (msg("compile_no_dynamo"),
     "torch.compile never ran dynamo (the model was not called through the compiled module)"),
    (msg("compile_no_graph"),
     ("torch.compile compiled no graph (dynamo fell back to eager: a backend error suppressed, or every frame "
      "skipped)")),
    (msg("knob_unregistered", knobs=["host_pause"]),
     ("no knob host_pause is registered in the trial process: its setting was not applied (add the knob to "
      "perfscope/knobs/__init__.py's REGISTRY)")),
    (msg("env_set_back", changed={"A": ["x", "y"], "B": [None, "z"]}),
     ("A was 'x' in the trial, not 'y': the workload's code set it; B was None in the trial, not 'z': the workload's "
      "code set it")),
    (msg("knob_set_back", why="cudnn.benchmark was off"),
     "cudnn.benchmark was off"),
    (msg("micro_batch_ended", micro=64, status="timeout"),
     "micro-batch 64 ended timeout"),
    (msg("micro_batch_memory_margin", micro=64, margin=0.9),
     "micro-batch 64 uses more than 90% of device memory"),
    (msg("micro_batch_plateau", micro=16),
     "throughput stopped improving at micro-batch 16"),
    (msg("micro_batch_cap", factor=64),
     "reached the search cap (64× the starting micro-batch)"),
    (msg("numerics_guard", reason=msg("numerics_no_losses")),
     "numerics guard: no losses to compare"),
    (msg("numerics_rejected", reason=msg("numerics_nonfinite"), steps=steps),
     (
      "numerics guard: the loss became non-finite (inf/NaN): overflow or a broken configuration; compared "
      "global steps 2–7 (samples 32–127 of the data stream, after the same updates)")),
    (msg("numerics_within", method="step by step", steps=steps, diff=0.0, tolerance=0.02),
     (
      "numerics guard: losses at global steps 2–7 (samples 32–127 of the data stream, after the same "
      "updates) within 0.0% of the baseline's (tolerance 2%)")),
    (msg("numerics_within", method="loss level", steps=msg("numerics_steps", first=2, last=2), diff=None,
         tolerance=0.04),
     (
      "numerics guard: mean loss over global step 2 (after the same number of updates; other samples per "
      "step) compared of the baseline's (tolerance 4%)")),
    (msg("numerics_steps", first=0, last=5, global_steps=False),
     "measured steps 0–5 (global steps not recorded by the perfscope that ran them)"),
    (msg("numerics_no_losses"),
     "no losses to compare"),
    (msg("numerics_nonfinite"),
     "the loss became non-finite (inf/NaN): overflow or a broken configuration"),
    (msg("numerics_step_loss", step=2, global_steps=True, loss=2.12, baseline=1.12, diff=0.893, tolerance=0.02),
     "loss at global step 2 is 2.12 vs baseline 1.12 (89.3% apart; tolerance 2%)"),
    (msg("numerics_grad_norm", norm=2.0, baseline=1.0, tolerance=0.04),
     "first-step gradient norm 2 vs baseline 1 (tolerance 4%)"),
    (msg("numerics_mean_loss", loss=1.2, baseline=1.0, diff=0.2, tolerance=0.04),
     "mean loss 1.2 vs baseline 1 (20.0% apart; tolerance 4% for a different micro-batch/accumulation)"),
    (msg("numerics_accumulation_grad_norm", norm=4.0, baseline=1.0, tolerance=0.25),
     (
      "first-step gradient norm 4 vs baseline 1 with the same global batch (tolerance 25%): is the loss "
      "divided by the accumulation steps?")),
    (msg("numerics_recipe_loss", optimizer="adafactor", loss=1.1, baseline=1.0, diff=0.1, tolerance=0.04),
     (
      "with adafactor the mean loss over the compared steps is 1.1 vs baseline 1 (10.0% higher; tolerance "
      "4%): it trains slower at this learning rate")),
    (msg("numerics_recipe_grad_norm", norm=2.0, baseline=1.0, tolerance=0.04),
     (
      "first-step gradient norm 2 vs baseline 1 (tolerance 4%): it is taken before any optimizer step, so "
      "the model or the loss differs, not just the optimizer")),
    (msg("layout_3d"),
     "TP × PP together (3-D) is not run by perfscope"),
    (msg("layout_dp_pp"),
     "pipeline stages replicated across data-parallel ranks (DP × PP) are not run by perfscope"),
    (msg("layout_split_unknown"),
     "the probe could not read how the model splits"),
    (msg("layout_tp_inapplicable", why=msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8)),
     "n_heads = 4 heads is not divisible by tp = 8"),
    (msg("tp_unknown_styles", bad={"blocks.0.qkv": "diagonal"}, styles=["colwise", "rowwise"]),
     "Workload.tensor_parallel_plan: unknown style(s) {'blocks.0.qkv': 'diagonal'}; use one of ('colwise', 'rowwise')"),
    (msg("tp_no_repeated_blocks"),
     "no repeated blocks (an nn.ModuleList of same-type layers) to split"),
    (msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8),
     "n_heads = 4 heads is not divisible by tp = 8"),
    (msg("tp_packed_qkv", name="qkv", fan_in=128, fan_out=384),
     ("packed q/k/v projection 'qkv' (128 → 384): its rows are [q; k; v], so a column split would give rank 0 all of "
      "q and half of k; use separate q/k/v Linears or give Workload.tensor_parallel_plan")),
    (msg("tp_no_projections", block="Block"),
     ("no attention (q/k/v + output) or MLP (up + down) projections recognised in the repeated block Block; give "
      "Workload.tensor_parallel_plan")),
    (msg("tp_features_indivisible", name="mlp.0", width=6, tp=4),
     "'mlp.0' has 6 features to split, not divisible by tp = 4"),
    (msg("tp_head_features_indivisible", name="q", width=96, head_dim=32, tp=2),
     "'q': 96 features = 3 heads of 32, not divisible by tp = 2"),
    (msg("layout_no_tp_plan", tp=2),
     "no TP plan was derived for tp = 2"),
    (msg("layout_layers_indivisible", layers=3, pp=2),
     "3 layers are not divisible by pp = 2"),
    (msg("layout_tp_spans_nodes", tp=4, per_node=2),
     (
      "tp = 4 spans nodes (2 ranks per node): a TP all-reduce per block in forward and backward on the "
      "inter-node network")),
    (msg("layout_wraps_model"),
     "the workload wraps its own model (Workload.wraps_model=True)"),
    (msg("layout_batch_indivisible", batch=6, microbatches=4),
     "the replica's batch 6 does not split into 4 micro-batches"),
    (msg("layout_would_not_fit", state=90 * GiB, limit=80 * GiB, share=0.9),
     "90.0 GiB of training state per rank, more than 90% of the 80.0 GiB a rank may hold"),
    (msg("layout_bubble", bubble=1 / 3, microbatches=2, limit=0.25),
     (
      "(p − 1) / (m + p − 1) = 33% idle with 2 micro-batches (above 25%); the same pipeline with more "
      "micro-batches is measured")),
    (msg("layout_pipeline_no_checkpointing"),
     "pipeline trials run without activation checkpointing"),
    (msg("layout_checkpointing_not_needed"),
     (
      "the state fits without it: checkpointing would only add recompute (measured only where the same "
      "layout runs out of memory)")),
    (msg("layout_not_measured", why="the analysis was interrupted before it ran"),
     "not measured: the analysis was interrupted before it ran"),
    (msg("layout_trial_limit"),
     "not measured: the layout search's trial limit was reached"),
    (msg("layout_under_load", load=msg("contended", why=["the hypervisor stole 0.50 cores"])),
     "measured under load (contended: the hypervisor stole 0.50 cores): compare with care"),
    (msg("cpu_sdpa_formula"),
     "CPU SDPA has no torch FLOP formula: counted with torch's SDPA formulas by perfscope"),
    (msg("attention_recompute_excluded", share=0.125),
     (
      "attention backward's QKᵀ recompute (12.5% of the FLOPs counted) is hardware FLOPs only: excluded "
      "from model FLOPs (MFU), kept in HFU")),
    (msg("no_matmul_counted"),
     "the FLOP counter saw no matmul/conv/attention: MFU is not meaningful for this model"),
    (msg("flops_tp_share", tp=2),
     (
      "the replica's step ÷ tp = 2 (embeddings, norms and the head, replicated, are computed on every rank:"
      " a slight undercount per rank)")),
    (msg("flops_checkpointing", blocks=4, extra=0.33),
     (
      "activation checkpointing of 4 blocks: the step as run recomputes +33% FLOPs (counted with "
      "checkpointing on: HFU > MFU)")),
    (msg("flops_pipeline_share", micro=4, accumulation=8, stages=2),
     "the unsplit model's step at micro-batch 4 × 8 ÷ 2 stages (equal blocks per stage)"),
    (msg("flops_scaled", counted=8, per_step=16),
     "the counted step had 8 samples: scaled to 16 per step"),
    (msg("flops_counted_again", discarded=["step 3", "step 4"]),
     "counted again on a later step, the count of step 3, step 4 being discarded: it was not a training step alone"),
    (msg("flops_counted_in_loop"),
     (
      "counted on one optimizer step of the loop as it ran: with activation checkpointing the recomputed "
      "forward is included, and this MFU is then a hardware-FLOP figure (pass Profiler(flops_per_step=...))")),
]


@pytest.mark.parametrize(("message", "said"), CASES, ids=[m.code for m, _ in CASES])
def test_each_template_says_what_it_said_as_prose(message: Message, said: str) -> None:
    assert words(message) == said


def test_every_search_template_and_flop_note_has_a_case() -> None:
    assert set(SEARCH) | FLOP_NOTES == {m.code for m, _ in CASES}

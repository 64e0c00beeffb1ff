"""The words of a FLOP count's notes (perfscope.wording's templates, split off to keep one concept a module):
TrialMetrics.flop_notes, how the count was made and what it does not cover (a trial's perfscope.trial.step, the
hooks' perfscope.hooks.flopstep, perfscope.measure.flops).

    words(msg("flops_scaled", counted=8, per_step=16))   # perfscope.wording.words: WORDING holds these
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FLOPS: dict[str, str | Callable[..., Any]] = {
    # how a trial counted (perfscope.trial.step.TrainStep.count_flops)
    "flops_fake_tensors": ("FLOPs counted on fake tensors (FakeTensorMode: shapes only, no memory or compute) at "
                           "micro-batch {micro}"),
    "flops_fake_failed": ("fake-tensor FLOP counting failed ({error}): counted one real micro-step at micro-batch {small} "
                          "and scaled ×{scale:g} to micro-batch {micro} (matmul/conv/attention FLOPs are linear in the "
                          "batch)"),
    "flops_per_token": ("sequence length varied in the window (dynamic padding: {low}–{high} token positions per "
                        "micro-batch, mean {mean:.1f}): FLOPs counted per token on a batch of {counted} and multiplied "
                        "by the window's {tokens} tokens over {batches} micro-batches (exact for weight matmuls; "
                        "attention's T² term is approximated linearly)"),
    # what the counter saw (perfscope.measure.flops)
    "cpu_sdpa_formula": "CPU SDPA has no torch FLOP formula: counted with torch's SDPA formulas by perfscope",
    "attention_recompute_excluded": ("attention backward's QKᵀ recompute ({share:.1%} of the FLOPs counted) is hardware "
                                     "FLOPs only: excluded from model FLOPs (MFU), kept in HFU"),
    "no_matmul_counted": "the FLOP counter saw no matmul/conv/attention: MFU is not meaningful for this model",
    # how the count became one rank's step
    "flops_tp_share": ("the replica's step ÷ tp = {tp} (embeddings, norms and the head, replicated, are computed on every "
                       "rank: a slight undercount per rank)"),
    "flops_checkpointing": ("activation checkpointing of {blocks} blocks: the step as run recomputes {extra:+.0%} FLOPs "
                            "(counted with checkpointing on: HFU > MFU)"),
    "flops_pipeline_share": ("the unsplit model's step at micro-batch {micro} × {accumulation} ÷ {stages} stages (equal "
                             "blocks per stage)"),
    # the hooks' count, on the user's loop (perfscope.hooks.flopstep)
    "flops_scaled": "the counted step had {counted} samples: scaled to {per_step} per step",
    "flops_counted_again": lambda *, discarded: (f"counted again on a later step, the count of {', '.join(discarded)} "
                                                 "being discarded: it was not a training step alone"),
    "flop_step_discarded": "step {step} ({reason} inside it)",
    "flops_counted_in_loop": ("counted on one optimizer step of the loop as it ran: with activation checkpointing the "
                              "recomputed forward is included, and this MFU is then a hardware-FLOP figure (pass "
                              "Profiler(flops_per_step=...))"),
    "flops_counted_eagerly": ("torch.compile'd code ran eagerly for the counted step "
                              "(torch.compiler.set_stance('force_eager')): FLOPs and ops are those of the eager module "
                              "underneath, as analyze counts them"),
}

"""The numerics guard: a faster configuration that trains differently is not a free win.

    verdict = compare_numerics(baseline_trial, candidate_trial)
    if not verdict.ok: ...   # rejected from the recommendation, with verdict.reason

Every trial starts from the same seed, hence the same initial weights and the same batches, so the
candidate's per-step losses over the measured steps and its first-step gradient norm can be compared
with the baseline's directly. Tolerances are relative and depend on the numerics the candidate runs:

    fp32 / TF32 / same precision   2%   (fused kernels, compile and TF32 reassociate sums; dropout RNG may differ)
    bf16 / fp16 autocast           8%   (8- / 11-bit mantissas in the matmuls)

A broken compile, an fp16 overflow (inf/NaN), or a wrong accumulation scale (loss off by ×accum) land far
outside these. When the samples per step change (a different global batch), losses of different batches are
not comparable step by step: then only the mean loss level is checked, with twice the tolerance.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from perfscope.results import Trial

TOLERANCE = {"fp32": 0.02, "bf16": 0.08, "fp16": 0.08}


@dataclass(frozen=True)
class NumericsVerdict:
    ok: bool
    reason: str | None
    max_relative_loss_diff: float | None = None


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-8)


def tolerance_for(trial: Trial) -> float:
    return TOLERANCE.get(str(trial.config.get("precision", "fp32")), TOLERANCE["fp32"])


def compare_numerics(baseline: Trial, candidate: Trial) -> NumericsVerdict:
    """Is the candidate training the same model as the baseline, within the candidate's tolerance?"""
    if baseline.metrics is None or candidate.metrics is None:
        return NumericsVerdict(False, "no losses to compare")
    base_losses = baseline.metrics.losses
    cand_losses = candidate.metrics.losses
    if any(v is None or not math.isfinite(v) for v in cand_losses):
        return NumericsVerdict(False, "the loss became non-finite (inf/NaN): overflow or a broken configuration")
    if any(v is None for v in base_losses) or not base_losses or not cand_losses:
        return NumericsVerdict(True, None)  # nothing trustworthy to compare against
    tol = tolerance_for(candidate)
    if baseline.metrics.samples_per_step != candidate.metrics.samples_per_step:
        base_mean = statistics.fmean(v for v in base_losses if v is not None)
        cand_mean = statistics.fmean(v for v in cand_losses if v is not None)
        diff = _rel(cand_mean, base_mean)
        if diff > 2 * tol:
            return NumericsVerdict(False, f"mean loss {cand_mean:.4g} vs baseline {base_mean:.4g} ({diff:.1%} apart; tolerance {2 * tol:.0%})", diff)
        return NumericsVerdict(True, None, diff)
    pairs = list(zip(base_losses, cand_losses))
    diffs = [_rel(c, b) for b, c in pairs if b is not None and c is not None]
    worst = max(diffs) if diffs else 0.0
    if worst > tol:
        step = diffs.index(worst)
        b, c = pairs[step]
        return NumericsVerdict(
            False, f"loss at measured step {step} is {c:.4g} vs baseline {b:.4g} ({worst:.1%} apart; tolerance {tol:.0%})", worst
        )
    bn, cn = baseline.metrics.first_grad_norm, candidate.metrics.first_grad_norm
    if bn and cn is not None and _rel(cn, bn) > 2 * tol:
        return NumericsVerdict(False, f"first-step gradient norm {cn:.4g} vs baseline {bn:.4g} (tolerance {2 * tol:.0%})", worst)
    return NumericsVerdict(True, None, worst)

"""The numerics guard: a faster configuration that trains differently is not a free win. Design notes: docs/sweep.md."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from perfscope.results import NumericsCheck, Trial, TrialMetrics
from perfscope.results.messages import Message, msg

TOLERANCE = {"fp32": 0.02, "bf16": 0.08, "fp16": 0.08}
ACCUM_GRAD_NORM_TOLERANCE = 0.25
NONFINITE = msg("numerics_nonfinite")


@dataclass(frozen=True)
class NumericsVerdict:
    ok: bool
    reason: Message | None
    max_relative_loss_diff: float | None = None
    check: NumericsCheck | None = None
    """What was compared, for the candidate's record (None: nothing could be)."""


@dataclass(frozen=True)
class AlignedLosses:
    """Both runs' losses at the same steps: global steps ``first`` onwards (measured-step indices when
    ``global_steps`` is False: a run recorded before perfscope counted the steps before its window)."""

    first: int
    base: list[float | None]
    cand: list[float | None]
    global_steps: bool = True

    @property
    def last(self) -> int:
        return self.first + max(len(self.base), 1) - 1


def aligned_losses(bm: TrialMetrics, cm: TrialMetrics) -> AlignedLosses:
    """The losses of the global steps both runs took after both warm-ups (from step 0 if they share none)."""
    if bm.losses_before_window is None or cm.losses_before_window is None:
        n = min(len(bm.losses), len(cm.losses))
        return AlignedLosses(0, list(bm.losses[:n]), list(cm.losses[:n]), global_steps=False)
    base = [*bm.losses_before_window, *bm.losses]
    cand = [*cm.losses_before_window, *cm.losses]
    end = min(len(base), len(cand))
    start = max(bm.warmup_steps, cm.warmup_steps)
    start = start if start < end else 0
    return AlignedLosses(start, base[start:end], cand[start:end])


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-8)


def tolerance_for(trial: Trial) -> float:
    return TOLERANCE.get(trial.config.precision, TOLERANCE["fp32"])


def compare_numerics(baseline: Trial, candidate: Trial) -> NumericsVerdict:
    """Is the candidate training the same model as the baseline, within the candidate's tolerance?"""
    if baseline.metrics is None or candidate.metrics is None:
        return NumericsVerdict(False, msg("numerics_no_losses"))
    bm, cm = baseline.metrics, candidate.metrics
    if any(v is None or not math.isfinite(v) for v in cm.losses):
        return NumericsVerdict(False, NONFINITE)
    if any(v is None for v in bm.losses) or not bm.losses or not cm.losses:
        return NumericsVerdict(True, None)  # nothing trustworthy to compare against
    aligned = aligned_losses(bm, cm)
    if any(v is None for v in aligned.base) or not aligned.base:
        return NumericsVerdict(True, None)  # the baseline's own loss was non-finite at a compared step
    if any(v is None or not math.isfinite(v) for v in aligned.cand):
        return NumericsVerdict(False, NONFINITE)
    tol = tolerance_for(candidate)
    if candidate.config.optimizer != baseline.config.optimizer:
        verdict = _compare_recipe(baseline, candidate, aligned, tol)
        method = "recipe"
    elif (bm.micro_batch_size, bm.grad_accum_steps) != (cm.micro_batch_size, cm.grad_accum_steps):
        verdict, method = _compare_levels(baseline, candidate, aligned, tol), "loss level"
    else:
        verdict, method = _compare_steps(bm, cm, aligned, tol), "step by step"
    check = NumericsCheck(
        reference=baseline.name, method=method, first_step=aligned.first, last_step=aligned.last,
        global_steps=aligned.global_steps, samples_per_step=bm.samples_per_step if method == "step by step" else None,
        ok=verdict.ok, reason=verdict.reason, max_relative_diff=verdict.max_relative_loss_diff,
        tolerance=tol if method == "step by step" else 2 * tol)  # a mean loss is held to twice the step tolerance
    return NumericsVerdict(verdict.ok, verdict.reason, verdict.max_relative_loss_diff, check)


def _compare_steps(bm: TrialMetrics, cm: TrialMetrics, aligned: AlignedLosses, tol: float) -> NumericsVerdict:
    """Same micro-batch and accumulation: each aligned step's loss, then the first-step gradient norm."""
    pairs = [(b, c) for b, c in zip(aligned.base, aligned.cand) if b is not None and c is not None]
    diffs = [_rel(c, b) for b, c in pairs]
    worst = max(diffs) if diffs else 0.0
    if worst > tol:
        step = diffs.index(worst)
        b, c = pairs[step]
        return NumericsVerdict(False, msg("numerics_step_loss", step=aligned.first + step, global_steps=aligned.global_steps,
                                          loss=c, baseline=b, diff=worst, tolerance=tol), worst)
    bn, cn = bm.first_grad_norm, cm.first_grad_norm
    if bn and cn is not None and _rel(cn, bn) > 2 * tol:
        return NumericsVerdict(False, msg("numerics_grad_norm", norm=cn, baseline=bn, tolerance=2 * tol), worst)
    return NumericsVerdict(True, None, worst)


def _mean_losses(aligned: AlignedLosses) -> tuple[float, float, float]:
    """(baseline's mean loss, candidate's, their relative difference) over the aligned steps' finite losses."""
    base_mean = statistics.fmean(v for v in aligned.base if v is not None)
    cand_mean = statistics.fmean(v for v in aligned.cand if v is not None)
    return base_mean, cand_mean, _rel(cand_mean, base_mean)


def _compare_levels(baseline: Trial, candidate: Trial, aligned: AlignedLosses, tol: float) -> NumericsVerdict:
    """Different micro-batch / accumulation: loss level, and the gradient norm when the global batch is the same."""
    bm, cm = baseline.metrics, candidate.metrics
    assert bm is not None and cm is not None
    base_mean, cand_mean, diff = _mean_losses(aligned)
    larger = cm.samples_per_step > bm.samples_per_step
    if diff > 2 * tol and not (larger and cand_mean < base_mean):
        return NumericsVerdict(False, msg("numerics_mean_loss", loss=cand_mean, baseline=base_mean, diff=diff,
                                          tolerance=2 * tol), diff)
    bn, cn = bm.first_grad_norm, cm.first_grad_norm
    if bm.samples_per_step == cm.samples_per_step and bn and cn is not None and _rel(cn, bn) > ACCUM_GRAD_NORM_TOLERANCE:
        return NumericsVerdict(False, msg("numerics_accumulation_grad_norm", norm=cn, baseline=bn,
                                          tolerance=ACCUM_GRAD_NORM_TOLERANCE), diff)
    return NumericsVerdict(True, None, diff)


def _compare_recipe(baseline: Trial, candidate: Trial, aligned: AlignedLosses, tol: float) -> NumericsVerdict:
    """Another optimizer: the same model and loss (first-step gradient norm), and no worse a loss over the steps."""
    bm, cm = baseline.metrics, candidate.metrics
    assert bm is not None and cm is not None
    base_mean, cand_mean, diff = _mean_losses(aligned)
    if cand_mean > base_mean and diff > 2 * tol:
        return NumericsVerdict(False, msg("numerics_recipe_loss", optimizer=cm.optimizer or candidate.config.optimizer,
                                          loss=cand_mean, baseline=base_mean, diff=diff, tolerance=2 * tol), diff)
    same_steps = (bm.micro_batch_size, bm.grad_accum_steps) == (cm.micro_batch_size, cm.grad_accum_steps)
    norm_tol = 2 * tol if same_steps else ACCUM_GRAD_NORM_TOLERANCE
    bn, cn = bm.first_grad_norm, cm.first_grad_norm
    if bm.samples_per_step == cm.samples_per_step and bn and cn is not None and _rel(cn, bn) > norm_tol:
        return NumericsVerdict(False, msg("numerics_recipe_grad_norm", norm=cn, baseline=bn, tolerance=norm_tol), diff)
    return NumericsVerdict(True, None, diff)

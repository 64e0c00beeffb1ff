"""The figures a gain was computed from: the candidate's rate and the reference rate its runs were paired with.

    figures = gain_figures(results, gain, candidate="fused_optimizer")   # GainFigures(rate=461.4, reference_rate=409.2, ...)
    figures.rate / figures.reference_rate == gain.ratio

Design notes: docs/report.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from perfscope.results.model import Gain, Results, Trial

AGREEMENT = 1e-6
"""Relative difference between the recomputed ratio and the gain's beyond which the pairing is not the gain's."""


@dataclass(frozen=True)
class GainFigures:
    rate: float
    """samples/s of the candidate: geometric mean of its runs."""
    reference_rate: float
    """samples/s of the reference: geometric mean over the candidate's runs of their paired reference runs."""
    runs: int
    reference_runs: int
    """Distinct reference runs the pairs used."""

    @property
    def words(self) -> str:
        return f"geometric mean of the {self.reference_runs} run(s) paired with the {self.runs} compared run(s)"


def _usable(runs: list[Trial]) -> list[Trial]:
    return [r for r in runs if r.evidence and r.metrics is not None and r.metrics.samples_per_s]


def _seq(run: Trial, missing: float) -> float:
    return run.sequence if run.sequence is not None else missing


def _neighbours(run: Trial, references: list[Trial]) -> list[Trial]:
    """The reference runs measured just before and after ``run`` (one side when only one exists)."""
    seq = _seq(run, math.inf)
    before = [r for r in references if _seq(r, -1) < seq]
    after = [r for r in references if _seq(r, -1) > seq]
    return ([before[-1]] if before else []) + ([after[0]] if after else [])


def _log(run: Trial) -> float:
    return math.log(run.metrics.samples_per_s)  # type: ignore[union-attr, arg-type]


def gain_figures(results: Results, gain: Gain, *, candidate: str) -> GainFigures | None:
    """The candidate's and the paired reference's samples/s behind ``gain``; None when they cannot be told."""
    candidates = _usable(results.runs(candidate))
    references = _usable(results.runs(gain.reference))
    pairs = [(c, n) for c in candidates if (n := _neighbours(c, references))]
    if not pairs:
        return None
    used = len({id(r) for _, n in pairs for r in n})
    if gain.rate and gain.reference_rate:
        return GainFigures(rate=gain.rate, reference_rate=gain.reference_rate, runs=len(pairs), reference_runs=used)
    log_c = statistics.fmean(_log(c) for c, _ in pairs)
    log_r = statistics.fmean(statistics.fmean(_log(r) for r in n) for _, n in pairs)
    if abs(math.exp(log_c - log_r) / gain.ratio - 1) > AGREEMENT:
        return None  # not the pairing the gain rests on (a relative gain, another comparison): show no figure
    return GainFigures(rate=math.exp(log_c), reference_rate=math.exp(log_r), runs=len(pairs), reference_runs=used)


def configuration_rate(results: Results, configuration: str) -> tuple[float, int] | None:
    """(geometric mean samples/s, runs) of a configuration's evidence runs: its figure when nothing is compared
    with it (the baseline kept), rather than one of its runs."""
    runs = _usable(results.runs(configuration))
    if not runs:
        return None
    return math.exp(statistics.fmean(_log(r) for r in runs)), len(runs)

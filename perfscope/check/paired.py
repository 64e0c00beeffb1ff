"""The A/B decision: a candidate's runs interleaved with the baseline revision's, in one job on one machine.

    verdict = decide_paired(paired_test(candidate_runs, baseline_runs), max_drop=0.05)

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
from typing import Protocol

from perfscope.check.decision import CONFIDENCE, POWER, Verdict
from perfscope.check.metrics import SAMPLES_PER_S
from perfscope.results import Gain
from perfscope.stats import confidence_text, power_at


class PairedTest(Protocol):
    """perfscope.search.compare.PairedTest's shape (the gate reads results, it never imports how they are measured)."""

    se: float
    df: float
    runs: int

    @property
    def decidable(self) -> bool: ...

    def gain(self, confidence: float) -> Gain: ...

Z_CONFIDENCE, Z_POWER = 1.959964, 0.841621


def rounds_for_power(test: PairedTest, max_drop: float) -> int | None:
    """--rounds that give 80% power at ``max_drop`` at this noise (normal approximation; se ∝ 1/sqrt(rounds))."""
    if not (math.isfinite(test.se) and test.se > 0 and test.runs > 0):
        return None
    effect = -math.log1p(-max_drop)
    return max(2, math.ceil(test.runs * (test.se * (Z_CONFIDENCE + Z_POWER) / effect) ** 2))


def power_text(test: PairedTest, max_drop: float) -> tuple[float | None, str]:
    """(power at the tolerance, the sentence a verdict carries)."""
    power = power_at(test.se, test.df, math.log1p(-max_drop), CONFIDENCE) if test.decidable else None
    needed = rounds_for_power(test, max_drop)
    if power is None:
        return None, "power at the tolerance unknown (no interval); use more --rounds"
    text = f"power at the {max_drop:.0%} tolerance {power:.0%}"
    if power < POWER and needed is not None:
        text += f"; --rounds {needed} would reach {POWER:.0%} at this noise"
    return power, text


def decide_paired(test: PairedTest | None, *, max_drop: float, baseline: float | None = None,
                  current: float | None = None, n_baseline: int = 0) -> Verdict:
    """Pass, regression or inconclusive for samples/s from the paired comparison (candidate / baseline)."""
    title = SAMPLES_PER_S.title
    common = dict(metric=SAMPLES_PER_S, max_drop=max_drop, baseline=baseline, current=current, n_baseline=n_baseline)
    if test is None:
        return Verdict(status="inconclusive", **common, message=(
            f"{title}: no run of one side counts as evidence (each was failed or measured under load, see the notes): "
            "nothing to decide on; run on a quiet machine"))
    gain = test.gain(CONFIDENCE)
    power, powered = power_text(test, max_drop)
    common |= dict(n_current=gain.runs, n_baseline=gain.reference_runs, change=gain.ratio - 1, power=power)
    limit = 1 - max_drop
    tolerance = f"{max_drop:.1%} tolerance"
    if not test.decidable or not (0 < gain.low <= gain.high < math.inf):
        return Verdict(status="inconclusive", **common, message=(
            f"{title} {gain.ratio - 1:+.1%}: no interval from {gain.runs} candidate run(s); {powered}"))
    common |= dict(low=gain.low - 1, high=gain.high - 1, confidence=gain.confidence, mde=gain.mde)
    change = (f"{gain.ratio - 1:+.1%} ({confidence_text(gain.confidence)} interval {gain.low - 1:+.1%} .. {gain.high - 1:+.1%}; "
              f"{gain.runs} candidate runs interleaved with {gain.reference_runs} baseline runs; {powered})")
    if gain.ratio < limit and gain.high < 1:
        return Verdict(status="regression", message=f"{title} {change}: worse than the {tolerance}", **common)
    if gain.low > limit:
        return Verdict(status="pass", message=f"{title} {change}: within the {tolerance}", **common)
    why = ("past the tolerance, but within this machine's run-to-run noise" if gain.ratio < limit else
           f"the interval reaches past the {tolerance}: a drop larger than it is not excluded")
    return Verdict(status="inconclusive", message=f"{title} {change}: {why}", **common)


__all__ = ["decide_paired", "power_text", "rounds_for_power"]

"""The A/B decision: a candidate's runs interleaved with the baseline revision's, in one job on one machine.

    verdict = decide_paired(paired_test(candidate_runs, baseline_runs), max_drop=0.05)

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
from typing import Protocol

from perfscope.check.decision import CONFIDENCE, POWER, Verdict, judge
from perfscope.check.metrics import SAMPLES_PER_S
from perfscope.results import Gain
from perfscope.results.messages import Message, msg
from perfscope.stats import power_at


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


def power_text(test: PairedTest, max_drop: float) -> tuple[float | None, Message]:
    """(power at the tolerance, the sentence a verdict carries)."""
    power = power_at(test.se, test.df, math.log1p(-max_drop), CONFIDENCE) if test.decidable else None
    needed = rounds_for_power(test, max_drop)
    if power is None:
        return None, msg("power_unknown")
    return power, msg("power_at_tolerance", max_drop=max_drop, power=power,
                      needed=needed if power < POWER else None, target=POWER)


def decide_paired(test: PairedTest | None, *, max_drop: float, baseline: float | None = None,
                  current: float | None = None, n_baseline: int = 0) -> Verdict:
    """Pass, regression or inconclusive for samples/s from the paired comparison (candidate / baseline)."""
    title = SAMPLES_PER_S.title
    common = dict(metric=SAMPLES_PER_S, max_drop=max_drop, baseline=baseline, current=current, n_baseline=n_baseline)
    if test is None:
        return Verdict(status="inconclusive", **common, message=msg("ab_no_evidence", title=title))
    gain = test.gain(CONFIDENCE)
    power, powered = power_text(test, max_drop)
    common |= dict(n_current=gain.runs, n_baseline=gain.reference_runs, change=gain.ratio - 1, power=power)
    if not test.decidable or not (0 < gain.low <= gain.high < math.inf):
        return Verdict(status="inconclusive", **common, message=msg(
            "ab_no_interval", title=title, change=gain.ratio - 1, runs=gain.runs, power=powered))
    common |= dict(mde=gain.mde)
    runs = msg("runs_interleaved", candidate=gain.runs, baseline=gain.reference_runs, power=powered)
    return judge(SAMPLES_PER_S, max_drop, gain.ratio, gain.low, gain.high, common, runs=runs,
                 confidence=gain.confidence)


__all__ = ["decide_paired", "power_text", "rounds_for_power"]

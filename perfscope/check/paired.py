"""The A/B decision: a candidate's runs interleaved with the baseline revision's, in one job on one machine.

    verdict = decide_paired(gain, max_drop=0.05)     # gain: perfscope.search.compare.compare(candidate, baseline)

Why this design: two revisions measured in the same job, alternating B C B C ... B as fresh processes, share
the machine, its clocks, power cap and neighbours, and the day: no machine or day offset can enter the
comparison (asv's `continuous` and CodSpeed's same-runner comparisons rest on the same idea). Each candidate
run is paired with the baseline runs just before and after it, so slow drift cancels too; the interval is
the sweep's own (perfscope.search.compare, 99%), a ratio of throughputs.

The rule is the gate's, in "higher is better" terms with L = 1 - max_drop: a regression when the ratio is past
L and the whole interval is below 1; inconclusive when past L but the interval reaches 1, or when there is no
interval; a pass otherwise, with a warning when the runs could not have resolved a drop of max_drop.
"""

from __future__ import annotations

import math

from perfscope.check.decision import Verdict
from perfscope.check.metrics import SAMPLES_PER_S
from perfscope.results import Gain
from perfscope.stats import confidence_text


def decide_paired(gain: Gain | None, *, max_drop: float, baseline: float | None = None,
                  current: float | None = None, n_baseline: int = 0) -> Verdict:
    """Pass, regression or inconclusive for samples/s from the paired comparison (``gain``: candidate / baseline)."""
    title = SAMPLES_PER_S.title
    common = dict(metric=SAMPLES_PER_S, max_drop=max_drop, baseline=baseline, current=current, n_baseline=n_baseline)
    if gain is None:
        return Verdict(status="inconclusive", **common, message=(
            f"{title}: no run of one side counts as evidence (each was failed or measured under load, see the notes): "
            "nothing to decide on; run on a quiet machine"))
    common |= dict(n_current=gain.runs, n_baseline=gain.reference_runs, change=gain.ratio - 1)
    limit = 1 - max_drop
    tolerance = f"{max_drop:.1%} tolerance"
    if not (0 < gain.low <= gain.high < math.inf):
        if gain.ratio < limit:
            return Verdict(status="inconclusive", **common, message=(
                f"{title} {gain.ratio - 1:+.1%} ({gain.runs} candidate run(s)): past the {tolerance}, but one run each "
                "says nothing of the run-to-run noise; use more --rounds"))
        return Verdict(status="inconclusive", **common, message=(
            f"{title} {gain.ratio - 1:+.1%}: no interval from {gain.runs} candidate run(s); use more --rounds"))
    common |= dict(low=gain.low - 1, high=gain.high - 1, confidence=gain.confidence, mde=gain.mde)
    change = (f"{gain.ratio - 1:+.1%} ({confidence_text(gain.confidence)} interval {gain.low - 1:+.1%} .. {gain.high - 1:+.1%}; "
              f"{gain.runs} candidate runs interleaved with {gain.reference_runs} baseline runs)")
    if gain.ratio < limit and gain.high < 1:
        return Verdict(status="regression", message=f"{title} {change}: worse than the {tolerance}", **common)
    if gain.ratio < limit:
        return Verdict(status="inconclusive", **common, message=(
            f"{title} {change}: past the {tolerance}, but within this machine's run-to-run noise; use more --rounds"))
    warnings: tuple[str, ...] = ()
    if gain.mde is None or gain.mde > max_drop:
        resolves = f"about {gain.mde:.0%}" if gain.mde is not None else "an unknown size"
        warnings = (f"{title}: these rounds resolve changes of {resolves}, more than the {tolerance}: a drop of "
                    f"{max_drop:.0%} could pass unseen; use more --rounds",)
    return Verdict(status="pass", message=f"{title} {change}: within the {tolerance}", warnings=warnings, **common)


__all__ = ["decide_paired"]

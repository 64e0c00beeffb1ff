"""The recommendation's gain, from confirmation runs that did not select it. Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Protocol

from perfscope.results import Gain, Sweep, Trial
from perfscope.results.config import TrialConfig
from perfscope.search.candidate import CONFIRMATION_RUNS, Candidate, SweepOptions
from perfscope.search.compare import MIN_DECIDING_RUNS, paired_test
from perfscope.search.decided import Deciding, left_over, recommend_decided
from perfscope.search.family import Family

CONFIRMATION = "confirmation"


class Sweeping(Deciding, Protocol):
    """What the confirmation needs of the sweep (perfscope.search.sweep.Sweeper, which calls it through its
    stacking phase): typed here, so this module never imports the sweep back."""

    options: SweepOptions
    sweep: Sweep

    def may_continue(self, runs: int = 2) -> bool: ...

    def measure(self, name: str, config: TrialConfig, knobs: list[str]) -> Trial: ...

    def runs(self, name: str) -> list[Trial]: ...


def confirmation_runs(sweeper: Sweeping, stacked: Candidate, selection: set[str]) -> tuple[list[Trial], Gain | None]:
    """Measure the stack's fixed number of confirmation runs (fewer only when the budget ends); their gain, from one
    look (weight 1: a family of one whose only look is the last)."""
    count = max(MIN_DECIDING_RUNS, min(CONFIRMATION_RUNS, sweeper.options.max_runs))
    family = Family(alpha=sweeper.options.family_alpha, max_runs=MIN_DECIDING_RUNS, reference=sweeper.sweep.baseline_trial)
    runs: list[Trial] = []
    while len(runs) < count and sweeper.may_continue():
        traced = not runs and sweeper.options.trace_recommended  # the trace comes after its timed window
        sweeper.measure(stacked.name, stacked.config.replace(capture_trace=traced), stacked.knobs)
        runs = [r for r in sweeper.runs(stacked.name) if r.name not in selection]
    gain: Gain | None = None
    if runs:
        family.record(CONFIRMATION, paired_test(runs, sweeper.runs(sweeper.sweep.baseline_trial)))
        gain = family.decide()[CONFIRMATION]
    if gain is not None:
        gain.method += f"; {len(runs)} confirmation run(s) measured after the selection, which never judged it"
    return runs, gain


def confirm_stack(sweeper: Sweeping, stacked: Candidate, semantics: list[str]) -> None:
    """Recommend ``stacked`` when its confirmation runs show a worthwhile, decided gain; the baseline otherwise."""
    sweep = sweeper.sweep
    selection = {t.name for t in sweeper.runs(stacked.name)}
    before = sweeper.gain(stacked.name)
    runs, gain = confirmation_runs(sweeper, stacked, selection)
    if sweep.stopped_early and (gain is None or gain.verdict == "undecided"):
        # The budget ended the confirmation before it could decide: the stack its joins decided stands, unconfirmed.
        left = f"its confirmation runs ({len(runs)} measured, undecided)" if runs else "its confirmation runs"
        recommend_decided(sweeper, [left])
        return
    if sweeper.worthwhile(gain):
        sweep.recommended_trial, sweep.recommended_knobs, sweep.recommended_gain = stacked.name, stacked.knobs, gain
        sweep.notes.append(f"the recommendation's gain comes from {len(runs)} confirmation run(s) measured after it was "
                           f"selected ({len(selection)} selection run(s) left out: the winner's curse)")
        if left := left_over(sweeper, stacked):  # confirmed, but the budget kept a winner from joining it
            sweep.unfinished = left
            sweep.notes.append(f"the budget left undone: {'; '.join(left)}")
        if semantics:
            sweep.notes.append("the recommended configuration changes training semantics: " + "; ".join(dict.fromkeys(semantics)))
        return
    sweep.recommended_trial = sweep.baseline_trial
    why = f"{gain.ratio:.2f}× [{gain.low:.2f}, {gain.high:.2f}], {gain.verdict}" if gain else "no confirmation run (budget)"
    sweep.notes.append(f"the stacked configuration ({', '.join(stacked.knobs)}) was not confirmed decidedly faster than "
                       f"the baseline, by {sweeper.options.min_gain:.0%} or more, in {len(runs)} confirmation run(s) ({why}): "
                       "the baseline is the recommendation")
    if before is not None and before.faster and gain is not None:
        # Runs of one configuration that disagree: say so, rather than leave a reader wondering why a stack judged
        # faster is not recommended (or quietly trust the luckier runs).
        sweep.notes.append(
            f"re-measured, {stacked.name} did not confirm its earlier {before.ratio:.2f}× ({before.runs} selection run(s)): "
            f"{gain.ratio:.2f}× over {gain.runs} confirmation run(s); this machine's run-to-run noise, not the knobs, "
            "may explain the earlier figure")

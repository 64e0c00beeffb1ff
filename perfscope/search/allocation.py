"""Where the sweep's runs go: adaptive repetition of undecided candidates, and what a budget holds back.

Design notes: docs/sweep.md."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from perfscope.knobs import Knob, KnobContext
from perfscope.results import Gain, Sweep, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.search.candidate import CONFIRMATION_RUNS, JOIN_RUNS, Candidate, SweepOptions
from perfscope.search.compare import MIN_DECIDING_RUNS, could_still_win, relative_gain
from perfscope.search.family import Family


class Allocation:
    """The repetition phase of `perfscope.search.sweep.Sweeper` (a mixin: it reads the sweep's state)."""

    ctx: KnobContext
    options: SweepOptions
    sweep: Sweep
    family: Family
    candidates: list[Candidate]
    measurements: Counter[str]
    measure: Callable[[str, TrialConfig, list[str]], Trial]
    elapsed: Callable[[], float]
    start: float
    pair_cost: dict[str, float]
    reserve: int
    run_s: Callable[[], float]
    may_continue: Callable[..., bool]
    judge: Callable[[], None]
    _winners: Callable[[], list[Candidate]]

    def reported_only(self, knob: Knob) -> bool:
        """A knob that can never join the recommendation (it changes the training recipe): under a budget it is
        measured after the knobs that can, which the budget's runs decide first."""
        return self.options.budget_s is not None and knob.changes_recipe

    def held_back(self) -> int:
        """Runs the later phases need of the budget: two pairs for each winner to join the stack, three for the
        confirmation — none while no candidate is decided a winner: then there is nothing to stack or confirm, and the
        best undecided candidate's next run is the one that can change the recommendation."""
        winners = len(self._winners())
        return JOIN_RUNS * (winners - 1) + CONFIRMATION_RUNS if winners else 0

    def refine(self) -> None:
        """Adaptive repetition: more runs for undecided candidates that could still be worth it (a single run
        never decides, so every candidate whose one-run interval reaches a worthwhile gain gets a second)."""
        while True:
            self.judge()
            open_ = self.open_candidates()
            if not open_ or self._budget_ends_refinement(open_):
                return
            best = max(self.affordable(open_), key=self._promise, default=None)
            if best is None:
                return
            self.measure(best.name, best.config, best.knobs)

    def affordable(self, open_: list[Candidate]) -> list[Candidate]:
        """The candidates whose next measurement, at its own latest cost (not the median `may_continue` assumes),
        fits what the budget leaves beyond the runs held back (docs/sweep.md)."""
        if self.options.budget_s is None:
            return open_
        keep = max(self.held_back(), self.reserve)
        left = self.options.budget_s - (self.elapsed() - self.start) - (keep + 1) * self.run_s()
        return [c for c in open_ if self.pair_cost.get(c.name, 0.0) <= left]

    def _budget_ends_refinement(self, open_: list[Candidate]) -> bool:
        """True when the budget leaves no run for the undecided ``open_`` beyond the runs held back for the stacking and
        the confirmation (said in the sweep's notes)."""
        if self.may_continue(keep=(held := self.held_back())):
            return False
        if held:
            self.sweep.notes.append(msg("runs_held_back", undecided=[c.name for c in open_], held=held))
        return True

    def _promise(self, cand: Candidate) -> tuple[bool, float]:
        """Which undecided candidate gets the next run. Unbounded: the highest upper bound (the one that could win
        most). Under a budget: first those that could join the recommendation, then the best point estimate per
        second of its measurement (docs/sweep.md, "the likeliest win, at its cost")."""
        if self.options.budget_s is None:
            return True, cand.gain.high if cand.gain else 0.0
        could_join = not cand.knob.changes_recipe and cand.config.samples_per_step == self.ctx.base.samples_per_step
        if cand.gain is None or cand.gain.ratio <= 0:
            return could_join, -math.inf
        gain = math.log(cand.gain.ratio)
        return could_join, gain / self.pair_cost[cand.name] if gain > 0 and self.pair_cost.get(cand.name) else gain

    def open_candidates(self) -> list[Candidate]:
        """The candidates another run could still decide (as judged last), in the sweep's order."""
        return [c for c in self.candidates if c.usable and self.measurements[c.name] < self.options.max_runs
                and (could_still_win(c.gain, self.options.min_gain, self.options.max_runs) and not self.family.futile(c.name)
                     or probably_slower(c.gain) or self._increment_open(c))]

    def _increment_open(self, cand: Candidate) -> bool:
        """A knob measured on top of another is judged by what it adds (`outcome`): decidedly faster than the
        baseline with both is not yet decidedly faster than the prerequisite alone, so its increment can still
        want runs."""
        if cand.requires is None or cand.gain is None or cand.requires.gain is None:
            return False
        increment = relative_gain(cand.gain, cand.requires.gain, reference=cand.requires.name)
        return increment.verdict == "undecided" and could_still_win(increment, self.options.min_gain, self.options.max_runs)


def probably_slower(gain: Gain | None) -> bool:
    """A probable slowdown gets the runs that can state it: too few runs to decide (compare.MIN_DECIDING_RUNS) and
    an interval below 1 (one run's spread assumed 3× the baseline's); or undecided, its estimate a slowdown and its
    interval short of +2% (at k − 1 df three runs rarely decide at the family's levels)."""
    if gain is None or gain.verdict != "undecided":
        return False
    return gain.high < 1.0 if gain.runs < MIN_DECIDING_RUNS else gain.ratio < 0.98 and gain.high < 1.02

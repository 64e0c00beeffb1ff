"""The recommendation of a sweep that did not finish: the best configuration decided so far, and what was not.

Design notes: docs/sweep.md."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from perfscope.knobs import REGISTRY, KnobContext
from perfscope.results import Gain, KnobOutcome, Sweep
from perfscope.results.messages import msg
from perfscope.search.candidate import Candidate, SweepOptions

STOPPED_BY_USER = msg("stopped_by_user")


class Deciding(Protocol):
    """What this module needs of the sweep (perfscope.search.sweep.Sweeper): typed here, never imported back."""

    ctx: KnobContext
    options: SweepOptions
    sweep: Sweep
    candidates: list[Candidate]
    stacked: Candidate | None
    unstacked: list[Candidate]
    out_of_time: list[str]

    def gain(self, name: str) -> Gain | None: ...

    def worthwhile(self, gain: Gain | None) -> bool: ...

    def _winners(self) -> list[Candidate]: ...


def _words(cand: Candidate) -> str:
    gain = f" ({cand.gain.ratio:.2f}× alone)" if cand.gain is not None else ""
    return f"{cand.knob.title}{gain}"


def decided(sweeper: Deciding) -> tuple[Candidate, Gain] | None:
    """The part of the stack already measured when it is worthwhile, else the best winner alone; None: nothing."""
    stacked = sweeper.stacked
    if stacked is not None:
        alone = any(c is stacked for c in sweeper.candidates)  # a winner alone: its family-wise gain
        gain = stacked.gain if alone else sweeper.gain(stacked.name)
        if not alone and gain is not None and gain.verdict == "undecided" and gain.low > 1:
            # Each join was decided (the stack beat the stack without it); the stack's own runs are too few for a
            # verdict of their own (compare.MIN_DECIDING_RUNS), but their interval already excludes no change.
            gain = replace(gain, verdict="faster", method=gain.method + f"; {gain.runs} run(s): faster by its "
                           "interval and its decided joins (a verdict of its own needs 3 runs)")
        if sweeper.worthwhile(gain):
            return stacked, gain  # type: ignore[return-value]
    best = next(iter(sweeper._winners()), None)
    return (best, best.gain) if best is not None and best.gain is not None else None


def not_stacked(sweeper: Deciding, chosen: Candidate) -> list[Candidate]:
    """Winners measured decidedly faster alone that the stack has not tried: in flight, pending or left out for
    the budget (`Stacking.unstacked`), or all of them when the stacking did not start."""
    inside = set(chosen.knobs)
    left = list(sweeper.unstacked) if sweeper.stacked is not None else sweeper._winners()
    out: dict[str, Candidate] = {}  # the first of each knob
    for cand in left:
        if cand.knob.id not in inside:
            out.setdefault(cand.knob.id, cand)
    return list(out.values())


def not_measured(sweeper: Deciding) -> list[str]:
    """Knobs the sweep skipped for lack of time (the budget, or a stop): their titles, as they were skipped (decided
    where they were, never read back from the words of their reasons)."""
    skipped = {o.knob: o.title for o in sweeper.sweep.knobs if o.status == "skipped"}
    return [skipped[k] for k in dict.fromkeys(sweeper.out_of_time) if k in skipped]


def record_unreached(sweeper: Deciding, known: set[str]) -> None:
    """One outcome for every knob the stop came before (``known``: the ids with an outcome or a candidate)."""
    for knob in REGISTRY:
        if knob.id in known:
            continue
        inapplicable = knob.applies(sweeper.ctx)
        status, reason = (("inapplicable", msg("knob_inapplicable", why=inapplicable)) if inapplicable
                          else ("skipped", msg("not_reached", why=STOPPED_BY_USER)))
        sweeper.sweep.knobs.append(KnobOutcome(knob=knob.id, title=knob.title, status=status, reason=[reason],  # type: ignore[arg-type]
                                               code_change=knob.code_change(sweeper.ctx)))
        if status == "skipped":
            sweeper.out_of_time.append(knob.id)


def left_over(sweeper: Deciding, chosen: Candidate | None) -> list[str]:
    """What the budget or a stop left undone around ``chosen``, in words: winners not stacked onto it, knobs not
    measured. Empty when nothing was."""
    waiting = not_stacked(sweeper, chosen) if chosen is not None else []
    knobs_left = not_measured(sweeper)
    return (([f"stacking {', '.join(_words(c) for c in waiting)} onto it"] if waiting else [])
            + ([f"measuring {', '.join(knobs_left)}"] if knobs_left else []))


def recommend_decided(sweeper: Deciding, unfinished: list[str]) -> None:
    """Recommend the decided configuration, naming ``unfinished`` (what the sweep did not get to) and the winners
    not stacked; the baseline when nothing was decided faster."""
    sweep = sweeper.sweep
    choice = decided(sweeper)
    left = left_over(sweeper, choice[0] if choice else None) + unfinished
    sweep.unfinished = left
    why = sweep.stopped_early or msg("sweep_stopped_early")
    if choice is None:
        sweep.recommended_trial, sweep.recommended_knobs, sweep.recommended_gain = sweep.baseline_trial, [], None
        sweep.notes.append(msg("stopped_nothing_decided", why=why, min_gain=sweeper.options.min_gain))
        return
    cand, gain = choice
    gain = replace(gain, method=gain.method + "; from the runs that selected it, not confirmed: the sweep stopped before "
                   "its confirmation runs (the winner's curse may overstate it)")
    sweep.recommended_trial, sweep.recommended_knobs, sweep.recommended_gain = cand.name, list(cand.knobs), gain
    sweep.notes.append(msg("stopped_decided_so_far", why=why, knobs=list(cand.knobs), left=list(left)))

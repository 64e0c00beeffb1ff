"""Greedy stacking of the sweep's winners into one recommended configuration, and its confirmation.

Design notes: docs/sweep.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.knobs import REGISTRY, Knob, KnobContext
from perfscope.results import Gain, Results, Sweep, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.search.candidate import BASELINE, CONFIRMATION_RUNS, Candidate, SweepOptions, run_failed
from perfscope.search.compare import MIN_DECIDING_RUNS, paired_test, relative_gain
from perfscope.search.decided import left_over, recommend_decided
from perfscope.search.family import Family
from perfscope.search.microbatch import MicroBatchResult, search_micro_batch


class Stacking:
    """The stacking phase of `perfscope.search.sweep.Sweeper` (a mixin: it reads the sweep's state)."""

    ctx: KnobContext
    options: SweepOptions
    sweep: Sweep
    candidates: list[Candidate]
    results: Results
    measure: Callable[[str, TrialConfig, list[str]], Trial]
    gain: Callable[[str], Gain | None]
    runs: Callable[[str], list[Trial]]
    may_continue: Callable[..., bool]
    _check_numerics: Callable[[Candidate], None]
    stacked: Candidate | None
    """The stack as far as its joins were measured: what a stopped sweep recommends (perfscope.search.decided)."""
    unstacked: list[Candidate]
    """Winners not tried on the stack yet (pending, in flight, or left out or cut short when the budget ended)."""
    out_of_time: list[str]
    """Knobs skipped for lack of time (perfscope.search.decided names them as not measured)."""
    join_cut: bool = False
    """The last join ended undecided because the budget did."""

    def worthwhile(self, gain: Gain | None) -> bool:
        """Decidedly faster, and by at least ``min_gain``: worth a code change. A 1.5% gain that many runs made
        "decided" (or that one of many multiple looks let through) must not become the recommendation alone,
        when it could not join a stack (`_joined` asks the same of every knob after the first)."""
        return gain is not None and gain.faster and gain.ratio >= 1 + self.options.min_gain

    def _winners(self) -> list[Candidate]:
        base = self.ctx.base.samples_per_step
        best_per_knob: dict[str, Candidate] = {}
        for cand in self.candidates:
            if not (cand.usable and self.worthwhile(cand.gain) and cand.config.samples_per_step == base):
                continue
            if cand.knob.search == "micro_batch":
                continue  # the micro-batch joins last, through the knob that keeps the global batch (grad_accum)
            if cand.knob.changes_recipe:
                continue  # a new optimizer: reported with its caveats, adopted only by a person who checks convergence
            current = best_per_knob.get(cand.knob.id)
            if current is None or cand.gain.ratio > current.gain.ratio:  # type: ignore[union-attr]
                best_per_knob[cand.knob.id] = cand
        return sorted(best_per_knob.values(), key=lambda c: -c.gain.ratio)  # type: ignore[union-attr]

    def stack(self, grad_accum_search: MicroBatchResult | None, micro_knob: Knob | None = None) -> Candidate | None:
        """Greedy: the best winner first, then each next one only if the stack with it is faster still."""
        current: Candidate | None = None
        touched: set[str] = set()
        pending = self._winners()
        self.unstacked = list(pending)
        progressed = True
        while pending and progressed:
            progressed = False
            for cand in list(pending):
                accepted = set(current.knobs) if current else set()
                if cand.requires is not None and cand.requires.knob.id not in accepted:
                    continue
                pending.remove(cand)
                progressed = True
                fields = set(cand.changes)
                if fields & touched or (current is not None and not cand.knob.compatible(current.config)):
                    # bf16 and fp16 both set precision: the better one is already in; a DDP bucket size once FSDP2 is
                    self.unstacked.remove(cand)
                    continue
                if current is None and cand.requires is None:
                    current, touched = cand, fields
                    self.stacked = current
                    self.unstacked.remove(cand)
                    continue
                if current is None or not self.may_continue(keep=CONFIRMATION_RUNS):
                    continue  # the budget ended: it stays unstacked, named as not finished
                self.join_cut = False
                joined = self._joined(current, cand.knob, cand.changes)
                if not self.join_cut:
                    self.unstacked.remove(cand)
                if joined is not None:
                    current, touched = joined, touched | fields
                    self.stacked = current
        self.unstacked = [c for c in self.unstacked if all(c is not p for p in pending)]  # their prerequisite never joined
        if grad_accum_search is not None and micro_knob is not None:
            current = self._stack_micro_batch(grad_accum_search, current, micro_knob)
        self.stacked = current
        return current

    def _joined(self, current: Candidate, knob: Knob, changes: dict[str, Any]) -> Candidate | None:
        """Measure the stack with ``knob``; keep it only if it is faster than the stack without it."""
        config = knob.apply(current.config, changes)
        knobs = [*current.knobs, knob.id]
        name = f"stack{len(knobs)}-{knob.id}"
        stacked = Candidate(knob, changes, name, config, knobs)
        stacked.first = self.measure(name, config, knobs)
        self._check_numerics(stacked)
        if self._failed_join(stacked):  # never a knob silently missing from the recommendation
            return None
        for _ in range(self.options.max_runs):
            stacked.gain, current.gain = self.gain(name), self.gain(current.name)
            if stacked.gain is None or current.gain is None:
                return None
            if self._adds(stacked.gain, current):
                return stacked
            if stacked.gain.high < current.gain.low or len(self.runs(name)) >= self.options.max_runs:
                return None
            if not self.may_continue(keep=CONFIRMATION_RUNS):
                self.join_cut = True  # undecided when the budget ended: named as not finished, not as rejected
                return None
            self.measure(name, config, knobs)
        return None

    def _failed_join(self, stacked: Candidate) -> bool:
        """True when the stack's first run is unusable: then the note on the sweep, the reason on the joining knob's
        outcome, and a warning when the run failed (a crash, OOM, timeout ...; not one that ran but is unusable)."""
        first, name, knobs = stacked.first, stacked.name, stacked.knobs
        if first is None or not first.ok:
            reason, failed = run_failed(first), True
        elif stacked.rejected is not None:
            reason, failed = stacked.rejected, False
        elif stacked.not_applied is not None:
            reason, failed = msg("stack_not_applied", why=stacked.not_applied), False
        else:
            return False
        joining = knobs[-1]
        self.sweep.notes.append(msg("stack_not_joined", knobs=list(knobs), name=name, failed=failed, reason=reason,
                                    joining=joining))
        outcome = next((o for o in self.sweep.knobs if o.knob == joining), None)
        if outcome is not None:
            outcome.reason.append(msg("did_not_join_stack", name=name, failed=failed, reason=reason))
        if failed:
            self.results.warnings.append(msg("stack_failed", knobs=list(knobs), reason=reason, joining=joining, trial=name))
        return True

    def _adds(self, gain: Gain, current: Candidate) -> bool:
        """``gain`` (against the baseline) `worthwhile` over ``current``'s."""
        return self.worthwhile(relative_gain(gain, current.gain, reference=current.name))  # type: ignore[arg-type]

    def _stack_micro_batch(self, micro: MicroBatchResult, current: Candidate | None, knob: Knob) -> Candidate | None:
        """The fastest micro-batch with the user's global batch, joined to the stack last."""
        global_batch = self.ctx.base.samples_per_step
        changes_memory = current is not None and (
            current.config.precision != self.ctx.base.precision
            or current.config.activation_checkpointing != self.ctx.base.activation_checkpointing
            or current.config.offload_activations != self.ctx.base.offload_activations)
        if current is not None and current.first is not None and micro.memory_limited and changes_memory and self.may_continue():
            research = search_micro_batch(lambda n, c, k: self.measure(n, c, k), current.config, current.first,
                                          name_prefix="stack-mb", knobs=list(current.knobs), max_factor=64,
                                          may_continue=self.may_continue)
            self.sweep.notes.append(msg("micro_batch_researched", knobs=list(current.knobs), fits=research.largest_fitting(),
                                        stopped=research.stopped or None))
            point = research.best(preserve_global=global_batch)
            if point is None or point.configuration == current.name:
                return current
            cand = Candidate(knob, micro_changes(point.config), point.configuration, point.config,
                             knobs_as(point.knobs, knob.id), first=point)
            self._check_numerics(cand)
            cand.gain = self.gain(cand.name)
            if not cand.usable or cand.gain is None or current.gain is None:
                return current
            return cand if self._adds(cand.gain, current) else current
        point = micro.best(preserve_global=global_batch)
        if point is None or point.configuration == BASELINE:
            return current
        if current is None:  # the micro-batch alone: its runs are the search's
            cand = next((c for c in self.candidates if c.name == point.configuration), None)
            return cand if cand is not None and cand.usable and self.worthwhile(cand.gain) else None
        if not self.may_continue():
            return current
        return self._joined(current, knob, micro_changes(point.config)) or current

    def recommend(self, search: MicroBatchResult | None, micro_knob: Knob | None = None) -> None:
        """The stack, confirmed by runs that did not select it (confirm_stack below); ``micro_knob`` (the
        micro-batch-search knob that keeps the global batch) joins it last with its point of ``search``."""
        stacked = self.stack(search if micro_knob is not None else None, micro_knob)
        if stacked is None and self.sweep.stopped_early:
            recommend_decided(self, [])  # nothing decided: the baseline, naming what the budget left unmeasured
            return
        if stacked is None:
            self.sweep.recommended_trial = BASELINE
            self.sweep.notes.append(msg("no_knob_faster", min_gain=self.options.min_gain))
            return
        semantics = [s for c in self._chain(stacked) for s in c.knob.changes_semantics(self.ctx, c.config)]
        confirm_stack(self, stacked, semantics)

    def _chain(self, cand: Candidate) -> list[Candidate]:
        by_knob = {c.knob.id: c for c in self.candidates}
        return [by_knob[k] for k in cand.knobs if k in by_knob] or [cand]


def knobs_as(knobs: list[str], knob_id: str) -> list[str]:
    """A micro-batch search point's knobs, naming the knob that chose it: the search tags its runs "micro_batch",
    but a point chosen for ``grad_accum`` keeps the global batch, and the recommendation must say so (the
    "micro_batch" knob is the one that changes the global batch)."""
    searched = {k.id for k in REGISTRY if k.search == "micro_batch"}  # the knobs the search measures (`Knob.search`)
    return [k for k in knobs if k not in searched] + [knob_id]


def micro_changes(config: TrialConfig) -> dict[str, Any]:
    return {"micro_batch_size": config.micro_batch_size, "grad_accum_steps": config.grad_accum_steps}


CONFIRMATION = "confirmation"


def confirmation_runs(sweeper: Stacking, stacked: Candidate, selection: set[str]) -> tuple[list[Trial], Gain | None]:
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


def confirm_stack(sweeper: Stacking, stacked: Candidate, semantics: list[Message]) -> None:
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
        sweep.notes.append(msg("gain_from_confirmation", runs=len(runs), selection=len(selection)))
        if left := left_over(sweeper, stacked):  # confirmed, but the budget kept a winner from joining it
            sweep.unfinished = left
            sweep.notes.append(msg("budget_left_undone", left=list(left)))
        if semantics:
            sweep.notes.append(msg("changes_semantics", semantics=list(dict.fromkeys(semantics))))
        return
    sweep.recommended_trial = sweep.baseline_trial
    sweep.notes.append(msg("stack_not_confirmed", knobs=list(stacked.knobs), min_gain=sweeper.options.min_gain, runs=len(runs),
                           ratio=gain.ratio if gain else None, low=gain.low if gain else None,
                           high=gain.high if gain else None, verdict=gain.verdict if gain else None))
    if before is not None and before.faster and gain is not None:
        # Runs of one configuration that disagree: say so, rather than leave a reader wondering why a stack judged
        # faster is not recommended (or quietly trust the luckier runs).
        sweep.notes.append(msg("earlier_gain_not_confirmed", name=stacked.name, before=before.ratio, selection=before.runs,
                               ratio=gain.ratio, runs=gain.runs))

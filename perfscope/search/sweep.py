"""The optimization sweep: every applicable knob alone, micro-batch search, greedy stacking, a recommendation.

Design notes: docs/sweep.md."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from perfscope.knobs import REGISTRY, Knob, KnobContext
from perfscope.ranking import knob_key
from perfscope.results import Gain, KnobOutcome, Results, Sweep, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.constraints import finite
from perfscope.results.messages import Message, msg
from perfscope.search.allocation import Allocation
from perfscope.search.candidate import BASELINE, Candidate, Measures, SweepOptions, run_failed
from perfscope.search.compare import ReferenceSeries, compare, paired_test, relative_gain, run_noise
from perfscope.search.decided import STOPPED_BY_USER, recommend_decided, record_unreached
from perfscope.search.family import Family
from perfscope.search.microbatch import BUDGET_EXHAUSTED, MicroBatchResult, micro_config, search_micro_batch
from perfscope.search.numerics import compare_numerics
from perfscope.search.plan import CPU_MICRO_FACTOR, GPU_MICRO_FACTOR
from perfscope.search.stacking import Stacking, knobs_as, micro_changes
from perfscope.workload import Workload

__all__ = ["BASELINE", "Candidate", "Measures", "SweepOptions", "Sweeper", "knob_context", "run_sweep"]


class Sweeper(Allocation, Stacking):
    def __init__(self, *, session: Measures, ctx: KnobContext, options: SweepOptions,
                 elapsed: Callable[[], float] = lambda: 0.0, sweep: Sweep | None = None, start: float | None = None) -> None:
        self.session, self.ctx, self.options, self.elapsed = session, ctx, options, elapsed
        self.start = elapsed() if start is None else start
        """Where the budget's clock starts (`analyze`: its first run, so the announced time is the one kept)."""
        self.pair_s: list[float] = []  # wall time of each measurement (a run and its baseline neighbour, retries included)
        self.pair_cost: dict[str, float] = {}  # each configuration's latest measurement (a compile run's is 5× another's)
        self.measurements: Counter[str] = Counter()
        """Measurements asked of each configuration, whatever became of them: what --max-runs caps. Its evidence
        runs cannot be the cap: under persistent load every run is excluded and refinement never ended."""
        self.reference = ctx.base.replace(capture_trace=False)
        self.sweep = sweep or Sweep(baseline_trial=BASELINE)
        self.sweep.budget_s = options.budget_s
        self.candidates: list[Candidate] = []
        self.outcomes: dict[int, KnobOutcome] = {}  # id(candidate) -> its outcome, for re-judging after more runs
        self.recorded = False  # the knobs' outcomes are in the sweep (a stop before that records them itself)
        self.stacked: Candidate | None = None  # the stack as far as it was measured (perfscope.search.decided)
        self.unstacked: list[Candidate] = []  # winners the stacking has not tried yet
        self.out_of_time: list[str] = []  # knobs skipped for lack of time: the budget or a stop (their ids)
        self.reserve = 0
        """Runs every measurement must leave to the later phases (`held_back`), while the knobs only reported are measured."""
        self.family = Family(alpha=options.family_alpha, max_runs=options.max_runs, reference=BASELINE)
        seed = options.order_seed if options.order_seed is not None else random.SystemRandom().randrange(2**31)
        self.order = random.Random(seed)
        self.sweep.notes.append(msg("order_randomized", seed=seed))

    # ----------------------------------------------------------------------------------- runs

    @property
    def results(self) -> Results:
        return self.session.results

    def runs(self, name: str) -> list[Trial]:
        return self.results.runs(name)

    @property
    def baseline(self) -> Trial:
        runs = self.runs(BASELINE) or [t for t in self.results.trials if t.configuration == BASELINE]
        return runs[0]

    def run_s(self) -> float:
        """A run's wall time so far: half the median measurement (retries under load included), or before the
        first measurement the median run's."""
        if self.pair_s:
            return statistics.median(self.pair_s) / 2
        walls = [t.wall_time_s for t in self.results.trials if t.wall_time_s]
        return statistics.median(walls) if walls else 0.0

    def may_continue(self, runs: int = 2, *, keep: int = 0) -> bool:
        """False when ``runs`` more runs, ``keep`` runs held back for a later phase that decides (the stacking, the
        confirmation: `held_back`) and one for the report would probably overrun the budget. Only a budget too
        short for the runs themselves stops the sweep (`stopped_early`); one short of what is held back moves on."""
        if self.options.budget_s is None:
            return True
        keep = max(keep, self.reserve)
        left = self.options.budget_s - (self.elapsed() - self.start)
        run_s = self.run_s()
        if (runs + keep + 1) * run_s <= left:
            return True
        if keep and (runs + 1) * run_s <= left:
            return False
        self.sweep.stopped_early = self.sweep.stopped_early or msg("budget_of_exhausted", budget_s=self.options.budget_s)
        return False

    def measure(self, name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        """One run of ``name`` and one of the baseline, in a random order (seeded per sweep): every candidate run
        has a baseline run beside it, and no position in the pair (a warm cache after the baseline, say)
        systematically favours the candidate."""
        self.measurements[name] += 1
        began = self.elapsed()
        baseline_first = self.order.random() < 0.5
        if baseline_first:
            self.session.measure(BASELINE, self.reference, [])
        trial = self.session.measure(name, config, knobs)
        if not baseline_first:
            self.session.measure(BASELINE, self.reference, [])
        now = self.elapsed()
        self.pair_s.append(now - began)
        self.pair_cost[name] = now - began
        self.sweep.elapsed_s = now - self.start
        return trial

    def gain(self, name: str) -> Gain | None:
        return compare(self.runs(name), self.runs(BASELINE))

    # --------------------------------------------------------------------------------- phases

    def selected(self, knob: Knob) -> Message | None:
        if self.options.only and knob.id not in self.options.only:
            return msg("knob_not_selected")
        if knob.id in self.options.skip:
            return msg("knob_skipped")
        return None

    def _outcome(self, knob: Knob, status: str, reason: Message, **kw: Any) -> KnobOutcome:
        outcome = KnobOutcome(knob=knob.id, title=knob.title, status=status, reason=[reason],  # type: ignore[arg-type]
                              code_change=knob.code_change(self.ctx), **kw)
        self.sweep.knobs.append(outcome)
        return outcome

    def try_variants(self, knob: Knob, on_top: Candidate | None = None) -> list[Candidate]:
        """Each variant of the knob on the baseline, or on ``on_top`` (the best variant of the knob it builds on)."""
        start = on_top.config if on_top is not None else self.reference
        out = []
        for i, changes in enumerate(knob.variants(self.ctx)):
            if not self.may_continue():
                break
            config = knob.apply(start, changes)
            name = knob.id if i == 0 else f"{knob.id}-{i + 1}"
            knobs = [*(on_top.knobs if on_top is not None else []), knob.id]
            cand = Candidate(knob, changes, name, config, knobs, requires=on_top)
            self._first_run(cand)
            out.append(cand)
            self.candidates.append(cand)  # at once: a stop during the next variant keeps this one's verdict
        return out

    def _first_run(self, cand: Candidate) -> None:
        """A candidate's first run (traced when its costs are read from a trace), then the numerics guard."""
        cand.first = self.measure(cand.name, self.first_config(cand), cand.knobs)
        self._check_numerics(cand)

    def first_config(self, cand: Candidate) -> TrialConfig:
        """The configuration of a candidate's first run: traced when its costs are read from a trace."""
        traced = cand.knob.traced and self.options.trace_recommended
        return cand.config.replace(capture_trace=True) if traced else cand.config

    def _check_numerics(self, cand: Candidate) -> None:
        if cand.first is not None and cand.first.ok:
            verdict = compare_numerics(self.baseline, cand.first)
            cand.first.numerics = verdict.check  # on the run's record: which steps and samples it rests on
            if not verdict.ok:
                cand.rejected = (verdict.check.message if verdict.check is not None
                                 else msg("numerics_guard", reason=verdict.reason))

    def evidence(self, cand: Candidate) -> list[Trial]:
        """The candidate's runs that may judge it: without its selection runs once it has others."""
        runs = self.runs(cand.name)
        return [r for r in runs if r.name not in cand.selection] or runs

    def judge(self) -> None:
        """Every candidate's gain from its runs so far, against the whole baseline series, with family-wise
        verdicts (perfscope.search.family): every measured candidate is a member of the family. A candidate the
        numerics guard rejected keeps its gain (the report shows how fast the wrong configuration was); only
        usable ones are refined or stacked."""
        measured = [c for c in self.candidates if c.first is not None and c.first.ok]
        baseline = ReferenceSeries(self.runs(BASELINE))  # read once for every candidate
        for cand in measured:
            self.family.record(cand.name, paired_test(self.evidence(cand), baseline))
        gains = self.family.decide()
        for cand in self.candidates:
            cand.gain = gains.get(cand.name) if cand in measured else None

    def micro_batch(self, knobs: list[Knob]) -> MicroBatchResult:
        """Search once for all the knobs measured by the micro-batch search (`Knob.search`); each reports its
        point: the fastest overall (``micro_batch``, flagged when it changes the global batch), or the fastest
        that keeps the user's global batch through accumulation (``grad_accum``: `Knob.keeps_global_batch`)."""
        max_factor = GPU_MICRO_FACTOR if self.ctx.cuda else CPU_MICRO_FACTOR  # CPU: no memory wall to find, so keep it short
        result = search_micro_batch(lambda n, c, k: self.measure(n, c, k), self.reference, self.baseline,
                                    max_factor=max_factor, may_continue=self.may_continue)
        self.sweep.micro_batch = result.points
        for knob in knobs:
            best = result.best(preserve_global=self.ctx.base.samples_per_step if knob.keeps_global_batch else None)
            if best is None or best.configuration == BASELINE:
                self._outcome(knob, "measured", result.stopped or msg("micro_batch_already_fastest"),
                              trial=BASELINE, setting=f"micro-batch {self.ctx.base.micro_batch_size}")
                continue
            cand = Candidate(knob, micro_changes(best.config), best.configuration, best.config,
                             knobs_as(best.knobs, knob.id), first=best, selection=frozenset([best.name]))
            self._check_numerics(cand)
            self.candidates.append(cand)
        return result

    def memory_pair(self, knob: Knob, result: MicroBatchResult) -> None:
        """A knob that frees memory, at the micro-batch that memory is for (it pays only through it; which one:
        docs/sweep.md, "knobs that free memory")."""
        largest = result.largest_fitting() or self.ctx.base.micro_batch_size
        oom = min((m for m, t in result.trials.items() if t.status == "oom"), default=largest * 2)
        micro = largest * 2 if knob.frees == "activations" else oom
        alone = self._best([c for c in self.candidates if c.knob is knob])
        changes = dict(alone.changes) if alone is not None else knob.variants(self.ctx)[0]
        config = micro_config(knob.apply(self.reference, changes), micro)
        if not self.may_continue():
            return
        name = f"{knob.id}-mb{micro}"
        cand = Candidate(knob, {**changes, "micro_batch_size": micro, "grad_accum_steps": config.grad_accum_steps}, name,
                         config, [knob.id, "micro_batch"],
                         notes=[msg("paired_micro_batch", micro=micro, largest=largest, oom=oom)])
        self._first_run(cand)
        self.candidates.append(cand)

    # ------------------------------------------------------------------------------- outcomes

    def outcome(self, cand: Candidate) -> KnobOutcome:
        """What the sweep says about one candidate, from its runs (failed, rejected or measured)."""
        knob = cand.knob
        semantics = knob.changes_semantics(self.ctx, cand.config)
        if knob.frees is not None and "micro_batch" in cand.knobs:  # paired with a micro-batch: its semantics too
            semantics = semantics + [s for k in REGISTRY if k.search == "micro_batch" and not k.keeps_global_batch
                                     for s in k.changes_semantics(self.ctx, cand.config)]
        common = dict(knob=knob.id, title=knob.title, trial=cand.name, setting=knob.describe(cand.changes),
                      changes_semantics=semantics, code_change=knob.code_change(self.ctx))
        first = cand.first
        if first is None or not first.ok:
            return KnobOutcome(status="failed", reason=[run_failed(first)], **common)
        if cand.not_applied:  # honest statuses: the run measured the baseline's setting, not the knob
            return KnobOutcome(status="failed", reason=[msg("knob_not_applied", why=cand.not_applied)], **common)
        gain = cand.gain
        notes: list[Message] = []
        if cand.requires is not None and gain is not None and cand.requires.gain is not None:
            # A knob measured on top of another is judged by what it adds: against the baseline, prefetching
            # on top of 8 workers would show the workers' whole gain as its own (a finding "1.6× faster" for
            # a knob that adds nothing). The outcome's gain is the increment, its reference the prerequisite.
            both = gain
            gain = relative_gain(both, cand.requires.gain, reference=cand.requires.name)
            notes.append(msg("measured_on_top", reference=cand.requires.name, ratio=gain.ratio, both=both.ratio))
        notes += cand.notes + [msg("knob_note", note=n) for n in knob.measured_notes(self.ctx, self.baseline, first)]
        if knob.changes_recipe:
            notes.append(msg("recipe_not_stacked"))
        if gain is not None and gain.verdict == "undecided":  # an unbounded end is None, as the file stores it
            notes.append(msg("cannot_tell", confidence=gain.confidence, low=gain.low, high=finite(gain.high), runs=gain.runs,
                             mde=gain.mde))
        mfu = first.metrics.mfu if first.metrics else None
        if cand.rejected:
            return KnobOutcome(status="rejected", reason=[cand.rejected, *notes], gain=gain, mfu=mfu, **common)
        if first.numerics is not None:
            notes.append(first.numerics.message)
        return KnobOutcome(status="measured", reason=notes, gain=gain, mfu=mfu, **common)

    # ------------------------------------------------------------------------------------ run

    def run(self) -> Sweep:
        """The whole search. A stop (Ctrl-C, SIGTERM: KeyboardInterrupt) still leaves a judged sweep with the
        configuration decided so far recommended (perfscope.search.decided), then goes on up to `analyze`."""
        try:
            self._search()
        except KeyboardInterrupt:
            self._stopped()
            raise
        finally:
            self.sweep.noise = run_noise(self.runs(BASELINE))
            self.sweep.knobs.sort(key=knob_key)  # perfscope.ranking: the report lists the knobs in this order
            self.sweep.elapsed_s = self.elapsed() - self.start
        return self.sweep

    def _stopped(self) -> None:
        """After a stop: every knob's outcome so far, those not reached, and the decided recommendation."""
        self.sweep.stopped_early = STOPPED_BY_USER
        if not self.recorded:
            self._record_outcomes()
        record_unreached(self, {o.knob for o in self.sweep.knobs} | {c.knob.id for c in self.candidates})
        if self.sweep.recommended_trial is None:
            recommend_decided(self, ["its confirmation runs"])

    def _search(self) -> None:
        by_knob: dict[str, list[Candidate]] = {}
        search_knobs: list[Knob] = []  # measured by the one micro-batch search
        first: list[Knob] = []
        later: list[Knob] = []  # under a budget, knobs only reported: measured after the refinement of those that can join
        for knob in REGISTRY:
            inapplicable, unselected = knob.applies(self.ctx), self.selected(knob)
            if inapplicable is not None:
                self._outcome(knob, "inapplicable", msg("knob_inapplicable", why=inapplicable))
            elif unselected is not None:
                self._outcome(knob, "skipped", unselected)
            elif knob.search == "micro_batch":
                search_knobs.append(knob)
            else:
                (later if self.reported_only(knob) else first).append(knob)
        # The micro-batch search is only reported too when none of its points can join (each changes the global batch)
        # and no knob waits on it (on a GPU, those that free memory are measured with its points).
        micro_later = (self.options.budget_s is not None and not any(k.keeps_global_batch for k in search_knobs)
                       and not (self.ctx.cuda and any(k.frees for k in first)))
        micro = self._pass(first, [] if micro_later else search_knobs, by_knob, None)
        self.refine()
        if later or (micro_later and search_knobs):
            self.reserve = self.held_back()  # every run of this pass leaves the stacking and the confirmation theirs
            micro = self._pass(later, search_knobs if micro_later else [], by_knob, micro)
            self.refine()
            self.reserve = 0
        self._record_outcomes()
        self.recommend(micro, next((k for k in search_knobs if k.keeps_global_batch), None))

    def _pass(self, knobs: list[Knob], search_knobs: list[Knob], by_knob: dict[str, list[Candidate]],
              micro: MicroBatchResult | None) -> MicroBatchResult | None:
        """The first runs of ``knobs`` (each alone, or on top of the knob it builds on), the micro-batch search of
        ``search_knobs``, and the knobs measured paired with its points (``micro``: a search already done)."""
        deferred: list[Knob] = []  # free activations: on a GPU measured only paired with the micro-batch they allow
        paired: list[Knob] = []  # free optimizer state: measured alone, and paired too on a GPU when memory limits
        micro_searched = any(k.search == "micro_batch" and k.id not in self.options.skip for k in REGISTRY)
        for knob in knobs:
            if knob.frees == "activations" and self.ctx.cuda and micro_searched:
                deferred.append(knob)  # on a GPU it pays only through memory: measured with the micro-batch search
                continue
            if knob.builds_on is not None and not knob.prerequisite_met(self.ctx.base):
                prerequisite = self._best(by_knob.get(knob.builds_on, []))
                if prerequisite is None:
                    self._outcome(knob, "skipped", msg("needs_prerequisite", prerequisite=knob.builds_on))
                    continue
                by_knob[knob.id] = self.try_variants(knob, on_top=prerequisite)
            else:
                by_knob[knob.id] = self.try_variants(knob)
                if knob.frees == "optimizer state" and self.ctx.cuda and micro_searched:
                    paired.append(knob)
            if not by_knob[knob.id]:
                self._skip_for_time(knob)
        if search_knobs and self.may_continue():
            micro = self.micro_batch(search_knobs)
        elif search_knobs:
            for knob in search_knobs:
                self._skip_for_time(knob)
        for knob in deferred:
            if micro is not None and micro.hit_oom:
                self.memory_pair(knob, micro)
            else:
                largest = micro.largest_fitting() if micro else None
                self._outcome(knob, "skipped", msg("memory_not_limiting", largest=largest, title=knob.title, cost=knob.cost)
                              if largest else msg("needs_micro_batch_search"))
        for knob in paired:
            if micro is not None and micro.hit_oom and any(c.first is not None and c.first.ok for c in by_knob.get(knob.id, [])):
                self.memory_pair(knob, micro)
        return micro

    def _skip_for_time(self, knob: Knob) -> None:
        """Record that ``knob`` got no run for lack of time (perfscope.search.decided names it as not measured)."""
        # Why no run: the sweep stopped, or the budget's last runs went to the recommendation.
        why = (msg("sweep_stopped", why=self.sweep.stopped_early) if self.sweep.stopped_early
               else msg("budget_reserved", runs=self.reserve) if self.reserve else BUDGET_EXHAUSTED)
        self._outcome(knob, "skipped", why)
        self.out_of_time.append(knob.id)

    def _best(self, cands: list[Candidate]) -> Candidate | None:
        """The fastest usable variant of a knob (by its gain's point estimate)."""
        self.judge()
        usable = [c for c in cands if c.usable and c.gain is not None]
        return max(usable, key=lambda c: c.gain.ratio, default=None)  # type: ignore[union-attr]

    def _record_outcomes(self) -> None:
        """One outcome per knob: its best variant (all variants' names in the reason)."""
        self.judge()
        by_id: dict[str, list[Candidate]] = {}
        for cand in self.candidates:
            by_id.setdefault(cand.knob.id, []).append(cand)
        for knob_id, cands in by_id.items():
            best = self._best(cands) or cands[-1]
            outcome = self.outcome(best)
            if len(cands) > 1:
                tried = [c.knob.describe(c.changes) or c.name for c in cands]
                outcome.reason.append(msg("fastest_of_variants", count=len(cands), tried=tried))
            self.outcomes[id(best)] = outcome
            self.sweep.knobs.append(outcome)
        self.recorded = True


def knob_context(results: Results, workload: Workload, base_config: TrialConfig) -> KnobContext:
    """What every knob asks of the run: the workload, the baseline's settings, the machine and the model's facts."""
    model = results.workload.model
    if model is None:
        raise RuntimeError("the probe did not describe the model (results.workload.model is None)")
    return KnobContext(workload=workload, base=base_config.replace(capture_trace=False), environment=results.environment,
                       model=model)


def run_sweep(session: Any, workload: Workload, base_config: TrialConfig, options: SweepOptions,
              sweeper: Callable[..., Sweeper] | None = None) -> Sweep:
    """Entry point from `perfscope analyze`: builds the knob context and runs the sweep through the session
    (``sweeper``: how to build the Sweeper, e.g. perfscope.lanes' parallel one; None: the sequential sweep). The
    budget's clock is the session's, started before the baseline: the time announced then is the time kept."""
    results = session.results
    ctx = knob_context(results, workload, base_config)
    sweep = Sweep(baseline_trial=BASELINE)
    results.sweep = sweep  # saved with every run, so an interrupted sweep keeps what it found
    running = (sweeper or Sweeper)(session=session, ctx=ctx, options=options, elapsed=session.progress.elapsed, sweep=sweep,
                                   start=0.0)
    session.may_retry = lambda: running.may_continue(1)  # a contended run's retry counts against the budget too
    try:
        return running.run()
    finally:
        session.may_retry = lambda: True

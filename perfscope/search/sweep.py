"""The optimization sweep: every applicable knob alone, micro-batch search, greedy stacking, a recommendation.

    sweep = Sweeper(session=session, ctx=ctx, options=SweepOptions()).run()

The search an expert does by hand, with error bars that come from runs, not steps (perfscope.search.compare):
1. Each applicable knob alone on top of the baseline, each variant in a fresh process, and after each
   candidate run a fresh baseline run: the baseline is re-measured through the whole sweep (interleaved,
   as asv does), so every candidate is compared with the baseline measured next to it in time, and the
   baseline's own run-to-run spread is this machine's noise. A knob that refines another (`builds_on`) is
   measured on top of that knob's best variant, and its outcome's gain is the increment over it. A failed
   run is recorded as such; a run whose losses leave the numerics guard's tolerance is rejected.
2. Micro-batch search (perfscope.search.microbatch): `micro_batch` = the fastest point, `grad_accum` = the
   fastest point that keeps the user's global batch. On a GPU, when it hits OOM, the knobs that free memory
   (`Knob.frees`: checkpointing, offloading, the lean optimizers) are measured paired with the larger
   micro-batch that memory allows.
3. Adaptive repetition (pinpoint): a candidate still undecided whose interval reaches a worthwhile gain
   gets another run (and its baseline neighbour), most promising first, until it is decided, it has
   `max_runs` runs, or the budget is spent. A win from a single run gets a second one (one lucky process
   must not make a knob a win) unless it is clear: its interval starts at 1.5× or more.
4. Greedy stacking of the winners, best first (never a knob that changes the training recipe): a knob joins
   only if the stack with it is faster than the stack without it (their gains against the same baseline
   compared with both intervals). The `grad_accum` micro-batch joins last, re-searched on the stack when
   memory limited the search and the stack changed memory.
5. The recommendation is the stack, with at least two runs (one of them traced); if it is not decidedly
   faster than the baseline, the baseline itself is recommended.
A wall-clock budget bounds the whole sweep: no run starts that the budget probably cannot finish.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfscope.errors import UserError
from perfscope.ranking import knob_key
from perfscope.results import Gain, KnobOutcome, Results, Sweep, Trial
from perfscope.results.config import TrialConfig
from perfscope.search.compare import MIN_DECIDING_RUNS, compare, compare_gains, could_still_win, paired_test, relative_gain, run_noise
from perfscope.search.confirm import confirm_stack
from perfscope.search.family import FAMILY_ALPHA, Family
from perfscope.search.knobs import REGISTRY, Knob, KnobContext, knob_ids
from perfscope.search.microbatch import MicroBatchResult, search_micro_batch
from perfscope.search.numerics import compare_numerics
from perfscope.search.stack_failures import record_stack_failure, stack_failure
from perfscope.workload import Workload
from perfscope.stats import confidence_text

BASELINE = "baseline"


class Measures(Protocol):
    """What the sweep needs from a measurement session (perfscope.trial.session.Session)."""

    results: Results

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None) -> Trial: ...


@dataclass(kw_only=True)
class SweepOptions:
    budget_s: float | None = None
    """Wall seconds for the whole sweep (None: unbounded; each candidate still stops at max_runs)."""
    only: list[str] = field(default_factory=list)
    """Knob ids to try (empty: all)."""
    skip: list[str] = field(default_factory=list)
    """Knob ids not to try."""
    trace_recommended: bool = True
    """Capture a profiler trace for the recommended configuration (exploration runs never capture one)."""
    min_gain: float = 0.02
    """A speed-up below this (2%) is not worth a code change: no extra runs to resolve it, no stacking for it."""
    max_runs: int = 10
    """Runs of one candidate at most (each with its baseline neighbour). 10, not 4: on the CPU noise model a +10%
    knob is found 96% [94, 97] of the time with 10, 83% [80, 86] with 8 and under half with 4, for ~10% more
    runs per 8 → 10 in a sweep with no effect (the futility stop ends hopeless candidates early);
    benchmarks/results/stat_simulation.txt."""
    family_alpha: float = FAMILY_ALPHA
    """Family-wise error rate of the sweep's faster/slower verdicts (perfscope.search.family)."""
    order_seed: int | None = None
    """Seed of the baseline/candidate order within each pair (None: drawn per sweep; recorded in the notes)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.only + self.skip) - set(knob_ids()))
        if unknown:
            raise UserError(f"unknown knob id(s) {', '.join(unknown)}; valid ids: {', '.join(knob_ids())}")
        if self.max_runs < 1:
            raise UserError("max_runs must be >= 1")


@dataclass
class Candidate:
    """One measured configuration: a knob's variant (or a stack), and the runs that measured it."""

    knob: Knob
    changes: dict[str, Any]
    """The knob's own changes (without its prerequisite's, when measured on top of one)."""
    name: str
    """The configuration's name; its runs are the trials of that configuration."""
    config: TrialConfig
    knobs: list[str]
    requires: Candidate | None = None
    """The prerequisite candidate this one was measured on top of."""
    notes: list[str] = field(default_factory=list)
    """What the sweep knows about how it was measured (e.g. the micro-batch it was paired with, and why)."""
    first: Trial | None = None
    gain: Gain | None = None
    rejected: str | None = None
    selection: frozenset[str] = frozenset()
    """Runs that chose this candidate among others (a micro-batch search point): once it has runs of its own
    after them, its gain leaves them out, so the selection's luck (winner's curse) does not inflate it."""

    @property
    def not_applied(self) -> str | None:
        """Why its run did not run with the knob's own setting (perfscope.trial.applied); None when it did."""
        metrics = self.first.metrics if self.first is not None else None
        hits = [why for key, why in (metrics.not_applied.items() if metrics is not None else ()) if key in self.changes]
        return "; ".join(hits) or None

    @property
    def usable(self) -> bool:
        return self.first is not None and self.first.ok and self.rejected is None and self.not_applied is None


class Sweeper:
    def __init__(
        self,
        *,
        session: Measures,
        ctx: KnobContext,
        options: SweepOptions,
        elapsed: Callable[[], float] = lambda: 0.0,
        sweep: Sweep | None = None,
    ) -> None:
        self.session, self.ctx, self.options, self.elapsed = session, ctx, options, elapsed
        self.start = elapsed()
        self.reference = ctx.base.replace(capture_trace=False)
        self.sweep = sweep or Sweep(baseline_trial=BASELINE)
        self.sweep.budget_s = options.budget_s
        self.candidates: list[Candidate] = []
        self.outcomes: dict[int, KnobOutcome] = {}  # id(candidate) -> its outcome, for re-judging after more runs
        self.family = Family(alpha=options.family_alpha, max_runs=options.max_runs, reference=BASELINE)
        seed = options.order_seed if options.order_seed is not None else random.SystemRandom().randrange(2**31)
        self.order = random.Random(seed)
        self.sweep.notes.append(f"baseline/candidate order within each pair randomized (seed {seed})")

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

    def may_continue(self, runs: int = 2) -> bool:
        """False when ``runs`` more runs (at the median run's wall time so far) would overrun the budget."""
        if self.options.budget_s is None:
            return True
        walls = [t.wall_time_s for t in self.results.trials if t.wall_time_s]
        estimate = statistics.median(walls) * runs if walls else 0.0
        if self.elapsed() - self.start + estimate > self.options.budget_s:
            self.sweep.stopped_early = self.sweep.stopped_early or f"budget of {self.options.budget_s:g} s exhausted"
            return False
        return True

    def measure(self, name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        """One run of ``name`` and one of the baseline, in a random order (seeded per sweep): every candidate run
        has a baseline run beside it, and no position in the pair (a warm cache after the baseline, say)
        systematically favours the candidate."""
        baseline_first = self.order.random() < 0.5
        if baseline_first:
            self.session.measure(BASELINE, self.reference, [])
        trial = self.session.measure(name, config, knobs)
        if not baseline_first:
            self.session.measure(BASELINE, self.reference, [])
        self.sweep.elapsed_s = self.elapsed() - self.start
        return trial

    def gain(self, name: str) -> Gain | None:
        return compare(self.runs(name), self.runs(BASELINE))

    # --------------------------------------------------------------------------------- phases

    def selected(self, knob: Knob) -> str | None:
        if self.options.only and knob.id not in self.options.only:
            return "not selected (--only)"
        if knob.id in self.options.skip:
            return "skipped (--skip)"
        return None

    def _outcome(self, knob: Knob, status: str, reason: str | None = None, **kw: Any) -> KnobOutcome:
        outcome = KnobOutcome(knob=knob.id, title=knob.title, status=status, reason=reason,  # type: ignore[arg-type]
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
        return out

    def _first_run(self, cand: Candidate) -> None:
        """A candidate's first run (traced when its costs are read from a trace), then the numerics guard."""
        traced = cand.knob.traced and self.options.trace_recommended
        cand.first = self.measure(cand.name, cand.config.replace(capture_trace=True) if traced else cand.config, cand.knobs)
        self._check_numerics(cand)

    def _check_numerics(self, cand: Candidate) -> None:
        if cand.first is not None and cand.first.ok:
            verdict = compare_numerics(self.baseline, cand.first)
            if not verdict.ok:
                cand.rejected = f"numerics guard: {verdict.reason}"

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
        for cand in measured:
            self.family.record(cand.name, paired_test(self.evidence(cand), self.runs(BASELINE)))
        gains = self.family.decide()
        for cand in self.candidates:
            cand.gain = gains.get(cand.name) if cand in measured else None

    def refine(self) -> None:
        """Adaptive repetition: more runs for undecided candidates that could still be worth it (a single run
        never decides, so every candidate whose one-run interval reaches a worthwhile gain gets a second)."""
        while True:
            self.judge()
            open_ = [c for c in self.candidates if c.usable and len(self.runs(c.name)) < self.options.max_runs
                     and (could_still_win(c.gain, self.options.min_gain, self.options.max_runs) and not self.family.futile(c.name)
                          or _probably_slower(c.gain) or self._increment_open(c))]
            if not open_ or not self.may_continue():
                return
            best = max(open_, key=lambda c: c.gain.high if c.gain else 0.0)
            self.measure(best.name, best.config, best.knobs)

    def _increment_open(self, cand: Candidate) -> bool:
        """A knob measured on top of another is judged by what it adds (`outcome`): decidedly faster than the
        baseline with both is not yet decidedly faster than the prerequisite alone, so its increment can still
        want runs."""
        if cand.requires is None or cand.gain is None or cand.requires.gain is None:
            return False
        increment = relative_gain(cand.gain, cand.requires.gain, reference=cand.requires.name)
        return increment.verdict == "undecided" and could_still_win(increment, self.options.min_gain, self.options.max_runs)

    def micro_batch(self, overall_knob: Knob | None, preserving_knob: Knob | None) -> MicroBatchResult:
        """Search once; report the fastest point overall (``micro_batch``, flagged when it changes the global
        batch) and the fastest point that keeps the user's global batch through accumulation (``grad_accum``)."""
        max_factor = 64 if self.ctx.cuda else 4  # CPU: no memory wall to find, so keep the search short
        result = search_micro_batch(lambda n, c, k: self.measure(n, c, k), self.reference, self.baseline,
                                    max_factor=max_factor, may_continue=self.may_continue)
        self.sweep.micro_batch = result.points
        for knob, best in ((overall_knob, result.best(preserve_global=None)),
                           (preserving_knob, result.best(preserve_global=self.ctx.base.samples_per_step))):
            if knob is None:
                continue
            if best is None or best.configuration == BASELINE:
                self._outcome(knob, "measured", result.stopped or "the user's micro-batch is already the fastest",
                              trial=BASELINE, setting=f"micro-batch {self.ctx.base.micro_batch_size}")
                continue
            cand = Candidate(knob, _micro_changes(best.config), best.configuration, best.config,
                             _knobs_as(best.knobs, knob.id), first=best, selection=frozenset([best.name]))
            self._check_numerics(cand)
            self.candidates.append(cand)
        return result

    def memory_pair(self, knob: Knob, result: MicroBatchResult) -> None:
        """A knob that frees memory, at the micro-batch that memory is for (it pays only through it): twice the
        largest that fit without it when it frees activations (they grow with the micro-batch), the smallest
        that ran out of memory without it when it frees optimizer state (a fixed amount)."""
        largest = result.largest_fitting() or self.ctx.base.micro_batch_size
        oom = min((m for m, t in result.trials.items() if t.status == "oom"), default=largest * 2)
        micro = largest * 2 if knob.frees == "activations" else oom
        alone = self._best([c for c in self.candidates if c.knob is knob])
        changes = dict(alone.changes) if alone is not None else knob.variants(self.ctx)[0]
        config = knob.apply(self.reference, changes).replace(micro_batch_size=micro, grad_accum_steps=1)
        base = self.ctx.base.samples_per_step
        if micro <= base and base % micro == 0:
            config = config.replace(grad_accum_steps=base // micro)
        if not self.may_continue():
            return
        name = f"{knob.id}-mb{micro}"
        cand = Candidate(knob, {**changes, "micro_batch_size": micro, "grad_accum_steps": config.grad_accum_steps}, name,
                         config, [knob.id, "micro_batch"],
                         notes=[f"paired with micro-batch {micro} (without it: fits up to {largest}, out of memory at {oom})"])
        self._first_run(cand)
        self.candidates.append(cand)

    # ------------------------------------------------------------------------------- outcomes

    def outcome(self, cand: Candidate) -> KnobOutcome:
        """What the sweep says about one candidate, from its runs (failed, rejected or measured)."""
        knob = cand.knob
        semantics = knob.changes_semantics(self.ctx, cand.config)
        if knob.frees is not None and "micro_batch" in cand.knobs:
            semantics = semantics + REGISTRY_BY_ID["micro_batch"].changes_semantics(self.ctx, cand.config)
        common = dict(knob=knob.id, title=knob.title, trial=cand.name, setting=describe_setting(cand.changes),
                      changes_semantics=semantics, code_change=knob.code_change(self.ctx))
        first = cand.first
        if first is None or not first.ok:
            line = (first.error or "").splitlines()[0] if first is not None and first.error else ""
            status = first.status if first is not None else "not run"
            return KnobOutcome(status="failed", reason=f"{status}: {line}".strip(": "), **common)
        if cand.not_applied:  # honest statuses: the run measured the baseline's setting, not the knob
            return KnobOutcome(status="failed", reason=f"not applied: {cand.not_applied}; the run did not measure this knob", **common)
        gain = cand.gain
        notes = []
        if cand.requires is not None and gain is not None and cand.requires.gain is not None:
            # A knob measured on top of another is judged by what it adds: against the baseline, prefetching
            # on top of 8 workers would show the workers' whole gain as its own (a finding "1.6× faster" for
            # a knob that adds nothing). The outcome's gain is the increment, its reference the prerequisite.
            both = gain
            gain = relative_gain(both, cand.requires.gain, reference=cand.requires.name)
            notes.append(f"measured on top of {cand.requires.name}: {gain.ratio:.2f}× over it "
                         f"({both.ratio:.2f}× over the baseline with both)")
        notes += cand.notes + knob.measured_notes(self.ctx, self.baseline, first)
        if knob.changes_recipe:
            notes.append("it changes the training recipe: reported, never stacked into the recommendation")
        if gain is not None and gain.verdict == "undecided":
            notes.append(cannot_tell(gain))
        mfu = first.metrics.mfu if first.metrics else None
        if cand.rejected:
            return KnobOutcome(status="rejected", reason="; ".join([cand.rejected, *notes]), gain=gain, mfu=mfu, **common)
        return KnobOutcome(status="measured", reason="; ".join(notes) or None, gain=gain, mfu=mfu, **common)

    # ------------------------------------------------------------------------------------ run

    def run(self) -> Sweep:
        by_knob: dict[str, list[Candidate]] = {}
        search_knobs: dict[str, Knob] = {}
        deferred: list[Knob] = []  # free activations: on a GPU measured only paired with the micro-batch they allow
        paired: list[Knob] = []  # free optimizer state: measured alone, and paired too on a GPU when memory limits
        micro_searched = not ({"micro_batch", "grad_accum"} <= set(self.options.skip))
        for knob in REGISTRY:
            inapplicable, unselected = knob.applies(self.ctx), self.selected(knob)
            if inapplicable is not None:
                self._outcome(knob, "inapplicable", inapplicable)
            elif unselected is not None:
                self._outcome(knob, "skipped", unselected)
            elif knob.search:
                search_knobs[knob.id] = knob
            elif knob.frees == "activations" and self.ctx.cuda and micro_searched:
                deferred.append(knob)  # on a GPU it pays only through memory: measured with the micro-batch search
            elif knob.builds_on is not None and not knob.prerequisite_met(self.ctx.base):
                prerequisite = self._best(by_knob.get(knob.builds_on, []))
                if prerequisite is None:
                    self._outcome(knob, "skipped", f"needs {knob.builds_on}, which produced no acceptable run to build on")
                    continue
                by_knob[knob.id] = self.try_variants(knob, on_top=prerequisite)
            else:
                by_knob[knob.id] = self.try_variants(knob)
                if knob.frees == "optimizer state" and self.ctx.cuda and micro_searched:
                    paired.append(knob)
            if knob.id in by_knob and not by_knob[knob.id]:
                self._outcome(knob, "skipped", self.sweep.stopped_early or "budget exhausted")
            self.candidates += by_knob.get(knob.id, [])
        micro: MicroBatchResult | None = None
        if search_knobs and self.may_continue():
            micro = self.micro_batch(search_knobs.get("micro_batch"), search_knobs.get("grad_accum"))
        elif search_knobs:
            for knob in search_knobs.values():
                self._outcome(knob, "skipped", self.sweep.stopped_early or "budget exhausted")
        for knob in deferred:
            if micro is not None and micro.hit_oom:
                self.memory_pair(knob, micro)
            else:
                largest = micro.largest_fitting() if micro else None
                self._outcome(knob, "skipped",
                              f"memory did not limit the micro-batch (fits up to {largest}): {knob.title} would only add {knob.cost}"
                              if largest else "needs the micro-batch search, which did not run")
        for knob in paired:
            if micro is not None and micro.hit_oom and any(c.first is not None and c.first.ok for c in by_knob.get(knob.id, [])):
                self.memory_pair(knob, micro)
        self.refine()
        self._record_outcomes()
        self.recommend(micro if "grad_accum" in search_knobs else None)
        self.sweep.noise = run_noise(self.runs(BASELINE))
        self.sweep.knobs.sort(key=knob_key)  # perfscope.ranking: the report lists the knobs in this order
        self.sweep.elapsed_s = self.elapsed() - self.start
        return self.sweep

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
                tried = ", ".join(describe_setting(c.changes) or c.name for c in cands)
                outcome.reason = "; ".join(filter(None, [outcome.reason, f"the fastest of {len(cands)} variants ({tried}): its gain is the selected variant's, "
                                                              "which may overstate the true gain (winner's curse)"]))
            self.outcomes[id(best)] = outcome
            self.sweep.knobs.append(outcome)

    # ------------------------------------------------------------------------------ stacking

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
            if cand.knob.id in ("grad_accum", "micro_batch"):
                continue  # the micro-batch joins last, through grad_accum (the global batch kept)
            if cand.knob.changes_recipe:
                continue  # a new optimizer: reported with its caveats, adopted only by a person who checks convergence
            current = best_per_knob.get(cand.knob.id)
            if current is None or cand.gain.ratio > current.gain.ratio:  # type: ignore[union-attr]
                best_per_knob[cand.knob.id] = cand
        return sorted(best_per_knob.values(), key=lambda c: -c.gain.ratio)  # type: ignore[union-attr]

    def stack(self, grad_accum_search: MicroBatchResult | None) -> Candidate | None:
        """Greedy: the best winner first, then each next one only if the stack with it is faster still.

        Candidates that change the global batch never join (the recommendation preserves semantics); a knob
        measured on top of another joins only after it. The micro-batch (same global batch) joins last.
        """
        current: Candidate | None = None
        touched: set[str] = set()
        pending = self._winners()
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
                if fields & touched:  # e.g. bf16 and fp16 both set precision: the better one is already in
                    continue
                if current is not None and not cand.knob.compatible(current.config):
                    continue  # e.g. a DDP bucket size once FSDP2 is in the stack
                if current is None and cand.requires is None:
                    current, touched = cand, fields
                    continue
                if current is None or not self.may_continue():
                    continue
                joined = self._joined(current, cand.knob, cand.changes)
                if joined is not None:
                    current, touched = joined, touched | fields
        if grad_accum_search is not None:
            current = self._stack_micro_batch(grad_accum_search, current)
        return current

    def _joined(self, current: Candidate, knob: Knob, changes: dict[str, Any]) -> Candidate | None:
        """Measure the stack with ``knob``; keep it only if it is faster than the stack without it."""
        config = knob.apply(current.config, changes)
        knobs = [*current.knobs, knob.id]
        name = f"stack{len(knobs)}-{knob.id}"
        stacked = Candidate(knob, changes, name, config, knobs)
        stacked.first = self.measure(name, config, knobs)
        self._check_numerics(stacked)
        failure = stack_failure(name, knobs, stacked.first, stacked.rejected, stacked.not_applied)
        if failure is not None:  # never a knob silently missing from the recommendation
            record_stack_failure(failure, self.sweep, self.results)
            return None
        for _ in range(self.options.max_runs):
            stacked.gain, current.gain = self.gain(name), self.gain(current.name)
            if stacked.gain is None or current.gain is None:
                return None
            ratio, decided = compare_gains(stacked.gain, current.gain)
            if decided and ratio >= 1 + self.options.min_gain:
                return stacked
            if stacked.gain.high < current.gain.low or len(self.runs(name)) >= self.options.max_runs or not self.may_continue():
                return None
            self.measure(name, config, knobs)
        return None

    def _stack_micro_batch(self, micro: MicroBatchResult, current: Candidate | None) -> Candidate | None:
        """The fastest micro-batch with the user's global batch, joined to the stack last.

        When memory limited the search and the stack changes memory (bf16 halves activations, checkpointing
        drops most of them), the micro-batch that fits has moved: it is searched again on top of the stack.
        """
        knob = REGISTRY_BY_ID["grad_accum"]
        global_batch = self.ctx.base.samples_per_step
        changes_memory = current is not None and (
            current.config.precision != self.ctx.base.precision
            or current.config.activation_checkpointing != self.ctx.base.activation_checkpointing
            or current.config.offload_activations != self.ctx.base.offload_activations)
        if current is not None and current.first is not None and micro.memory_limited and changes_memory and self.may_continue():
            research = search_micro_batch(lambda n, c, k: self.measure(n, c, k), current.config, current.first,
                                          name_prefix="stack-mb", knobs=list(current.knobs), max_factor=64,
                                          may_continue=self.may_continue)
            self.sweep.notes.append(f"micro-batch re-searched on the stack ({', '.join(current.knobs)}): fits up to "
                                    f"{research.largest_fitting()}" + (f" ({research.stopped})" if research.stopped else ""))
            point = research.best(preserve_global=global_batch)
            if point is None or point.configuration == current.name:
                return current
            cand = Candidate(knob, _micro_changes(point.config), point.configuration, point.config,
                             _knobs_as(point.knobs, knob.id), first=point)
            self._check_numerics(cand)
            cand.gain = self.gain(cand.name)
            if not cand.usable or cand.gain is None or current.gain is None:
                return current
            ratio, decided = compare_gains(cand.gain, current.gain)
            return cand if decided and ratio >= 1 + self.options.min_gain else current
        point = micro.best(preserve_global=global_batch)
        if point is None or point.configuration == BASELINE:
            return current
        if current is None:  # the micro-batch alone: its runs are the search's
            cand = next((c for c in self.candidates if c.name == point.configuration), None)
            return cand if cand is not None and cand.usable and self.worthwhile(cand.gain) else None
        if not self.may_continue():
            return current
        return self._joined(current, knob, _micro_changes(point.config)) or current

    def recommend(self, grad_accum_search: MicroBatchResult | None) -> None:
        """The stack, confirmed by runs that did not select it (perfscope.search.confirm)."""
        stacked = self.stack(grad_accum_search)
        if stacked is None:
            self.sweep.recommended_trial = BASELINE
            self.sweep.notes.append(f"no knob made the baseline decidedly faster, by {self.options.min_gain:.0%} or more: "
                                    "the baseline is the recommendation")
            return
        semantics = [s for c in self._chain(stacked) for s in c.knob.changes_semantics(self.ctx, c.config)]
        confirm_stack(self, stacked, semantics)

    def _chain(self, cand: Candidate) -> list[Candidate]:
        by_knob = {c.knob.id: c for c in self.candidates}
        return [by_knob[k] for k in cand.knobs if k in by_knob] or [cand]


REGISTRY_BY_ID = {k.id: k for k in REGISTRY}


def _probably_slower(gain: Gain | None) -> bool:
    """Too few runs to decide (compare.MIN_DECIDING_RUNS), and an interval below 1 (one run's spread assumed 3×
    the baseline's): a probable slowdown gets the runs that can state it."""
    return gain is not None and gain.runs < MIN_DECIDING_RUNS and gain.high < 1.0


def _knobs_as(knobs: list[str], knob_id: str) -> list[str]:
    """A micro-batch search point's knobs, naming the knob that chose it: the search tags its runs "micro_batch",
    but a point chosen for ``grad_accum`` keeps the global batch, and the recommendation must say so (the
    "micro_batch" knob is the one that changes the global batch)."""
    return [k for k in knobs if k not in ("micro_batch", "grad_accum")] + [knob_id]


def _micro_changes(config: TrialConfig) -> dict[str, Any]:
    return {"micro_batch_size": config.micro_batch_size, "grad_accum_steps": config.grad_accum_steps}


def describe_setting(changes: dict[str, Any]) -> str:
    """A knob's winning value in words, for the report ("micro-batch 32 × accumulation 2", "4 workers")."""
    words = []
    for key, value in changes.items():
        if key == "micro_batch_size":
            words.append(f"micro-batch {value}")
        elif key == "grad_accum_steps":
            words.append(f"accumulation {value}")
        elif key == "num_workers":
            words.append(f"{value} worker{'s' if value != 1 else ''}")
        elif key == "env":
            words += [f"{k}={v}" for k, v in value.items()]
        elif value is True:
            words.append(key.replace("_", " "))
        else:
            words.append(f"{key.replace('_', ' ')} {value}")
    return " × ".join(words)


def cannot_tell(gain: Gain) -> str:
    mde = f"; these {gain.runs} run(s) detect changes of about {gain.mde:.0%} or more" if gain.mde is not None else ""
    return f"cannot tell at this machine's noise level ({confidence_text(gain.confidence)} interval {gain.low:.2f}–{gain.high:.2f}{mde})"


def run_sweep(session: Any, workload: Workload, base_config: TrialConfig, options: SweepOptions) -> Sweep:
    """Entry point from `perfscope analyze`: builds the knob context and runs the sweep through the session."""
    results = session.results
    model = results.workload.model
    if model is None:
        raise RuntimeError("the probe did not describe the model (results.workload.model is None)")
    ctx = KnobContext(workload=workload, base=base_config.replace(capture_trace=False), environment=results.environment, model=model)
    sweep = Sweep(baseline_trial=BASELINE)
    results.sweep = sweep  # saved with every run, so an interrupted sweep keeps what it found
    return Sweeper(session=session, ctx=ctx, options=options, elapsed=session.progress.elapsed, sweep=sweep).run()

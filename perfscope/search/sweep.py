"""The optimization sweep: every applicable knob alone, micro-batch search, greedy stacking, a recommendation.

    sweep = Sweeper(measure=session.measure, ctx=ctx, baseline=baseline_trial, options=SweepOptions()).run()

The search an expert does by hand, with error bars:
0. The baseline again, in a fresh process: the drift between two identical runs is the noise floor, and
   every gain's interval is widened by it (perfscope.search.gains).
1. Each applicable knob alone on top of the baseline (its variants too: the best one is kept); a knob that
   refines another (`builds_on`) on top of that knob's best trial. A trial that fails is recorded as such;
   a trial whose losses leave the numerics guard's tolerance is rejected.
2. Micro-batch search (perfscope.search.microbatch): `micro_batch` = the fastest point, `grad_accum` = the fastest
   point with the user's global batch. On a GPU, when it hits OOM, checkpointing is measured paired with the
   larger micro-batch it allows — that pair is what checkpointing is for.
3. Greedy stacking of the significant winners, best first: a knob joins the stack only if it makes the
   stack significantly faster still (and keeps the numerics and the global batch). The `grad_accum`
   micro-batch joins last — re-searched on the stack when memory limited the search and the stack changed
   memory (bf16, checkpointing).
4. The recommended configuration is measured again in full as its own trial; if it is not significantly
   faster than the baseline, the baseline itself is recommended — the recommendation never ranks below it.
A wall-clock budget bounds the whole sweep: no trial starts that the budget probably cannot finish.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfscope.errors import UserError
from perfscope.results import KnobOutcome, Sweep, Trial
from perfscope.search.gains import is_win, measured_gain, process_drift
from perfscope.search.knobs import REGISTRY, Knob, KnobContext, ModelFacts, knob_ids
from perfscope.search.microbatch import MicroBatchResult, search_micro_batch
from perfscope.search.numerics import compare_numerics
from perfscope.trial.config import TrialConfig
from perfscope.workload import Workload

Measure = Callable[[str, TrialConfig, list[str]], Trial]
MICRO_BATCH = "micro_batch"
GRAD_ACCUM = "grad_accum"
CHECKPOINTING = "activation_checkpointing"


@dataclass(kw_only=True)
class SweepOptions:
    budget_s: float | None = None
    """Wall seconds for the whole sweep (None: unbounded)."""
    only: list[str] = field(default_factory=list)
    """Knob ids to try (empty: all)."""
    skip: list[str] = field(default_factory=list)
    """Knob ids not to try."""
    trace_recommended: bool = True
    """Capture a profiler trace for the recommended configuration (exploration trials never capture one)."""
    min_stack_gain: float = 1.02
    """A knob joins the stack only if it speeds the stack up by at least this ratio (and significantly):
    within-run intervals cannot see run-to-run drift, so tiny 'significant' gains are not worth a change."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.only + self.skip) - set(knob_ids()))
        if unknown:
            raise UserError(f"unknown knob id(s) {', '.join(unknown)}; valid ids: {', '.join(knob_ids())}")


@dataclass
class _Candidate:
    knob: Knob
    changes: dict[str, Any]
    """The knob's own changes (for a knob measured on top of its prerequisite, without the prerequisite's)."""
    trial: Trial
    outcome: KnobOutcome
    requires: str | None = None
    """Id of the knob that must be in the stack first (set when measured on top of it)."""


class Sweeper:
    def __init__(
        self,
        *,
        measure: Measure,
        ctx: KnobContext,
        baseline: Trial,
        options: SweepOptions,
        elapsed: Callable[[], float] = lambda: 0.0,
        sweep: Sweep | None = None,
    ) -> None:
        self.measure_fn, self.ctx, self.baseline, self.options, self.elapsed = measure, ctx, baseline, options, elapsed
        self.start = elapsed()
        self.sweep = sweep or Sweep(baseline_trial=baseline.name)
        self.sweep.budget_s = options.budget_s
        self.wall_times: list[float] = [baseline.wall_time_s or 0.0]
        self.drift = 0.0

    # ----------------------------------------------------------------------------------- budget

    def may_continue(self) -> bool:
        """False when the next trial (estimated as the median trial so far) would overrun the budget."""
        if self.options.budget_s is None:
            return True
        estimate = statistics.median(self.wall_times) if self.wall_times else 0.0
        if self.elapsed() - self.start + estimate > self.options.budget_s:
            self.sweep.stopped_early = self.sweep.stopped_early or f"budget of {self.options.budget_s:g} s exhausted"
            return False
        return True

    def measure(self, name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        trial = self.measure_fn(name, config, knobs)
        self.wall_times.append(trial.wall_time_s or 0.0)
        self.sweep.elapsed_s = self.elapsed() - self.start
        return trial

    # ---------------------------------------------------------------------------------- phases

    def selected(self, knob: Knob) -> str | None:
        if self.options.only and knob.id not in self.options.only:
            return "not selected (--only)"
        if knob.id in self.options.skip:
            return "skipped (--skip)"
        return None

    def _outcome(self, knob: Knob, status: str, reason: str | None = None, **kw: Any) -> KnobOutcome:
        outcome = KnobOutcome(knob=knob.id, title=knob.title, status=status, reason=reason, code_change=knob.code_change(self.ctx), **kw)  # type: ignore[arg-type]
        self.sweep.knobs.append(outcome)
        return outcome

    def _judge(self, knob: Knob, trial: Trial, config: TrialConfig, against: Trial | None = None) -> KnobOutcome:
        """A measured trial -> its outcome: failed, rejected by the numerics guard, or measured with a gain."""
        semantics = knob.changes_semantics(self.ctx, config)
        if not trial.ok:
            first = (trial.error or "").splitlines()[0] if trial.error else ""
            return KnobOutcome(knob=knob.id, title=knob.title, status="failed", reason=f"{trial.status}: {first}".strip(": "),
                               trial=trial.name, changes_semantics=semantics, code_change=knob.code_change(self.ctx))
        verdict = compare_numerics(self.baseline, trial)
        gain = measured_gain(against or self.baseline, trial, drift=self.drift)
        mfu = trial.metrics.mfu if trial.metrics else None
        if not verdict.ok:
            return KnobOutcome(knob=knob.id, title=knob.title, status="rejected", reason=f"numerics guard: {verdict.reason}",
                               trial=trial.name, gain=gain, mfu=mfu, changes_semantics=semantics, code_change=knob.code_change(self.ctx))
        return KnobOutcome(knob=knob.id, title=knob.title, status="measured", trial=trial.name, gain=gain, mfu=mfu,
                           changes_semantics=semantics, code_change=knob.code_change(self.ctx))

    def try_alone(self, knob: Knob, on_top: _Candidate | None = None) -> _Candidate | None:
        """Each variant of the knob on the baseline (or on ``on_top``, the best variant of the knob it builds
        on, when the baseline lacks it: the gain is then the increment over that trial); the fastest
        acceptable variant represents the knob."""
        best: _Candidate | None = None
        outcomes: list[KnobOutcome] = []
        base = on_top.trial if on_top is not None else None
        start = TrialConfig.from_dict(on_top.trial.config) if on_top is not None else self.ctx.base
        for i, changes in enumerate(knob.variants(self.ctx)):
            if not self.may_continue():
                break
            config = knob.apply(start, changes)
            name = knob.id if i == 0 else f"{knob.id}-{i + 1}"
            knobs = [on_top.knob.id, knob.id] if on_top is not None else [knob.id]
            trial = self.measure(name, config, knobs)
            outcome = self._judge(knob, trial, config, against=base)
            outcomes.append(outcome)
            if outcome.status == "measured" and (best is None or outcome.gain.ratio > best.outcome.gain.ratio):  # type: ignore[union-attr]
                best = _Candidate(knob, changes, trial, outcome, requires=on_top.knob.id if on_top is not None else None)
        if not outcomes:
            self._outcome(knob, "skipped", self.sweep.stopped_early or "budget exhausted")
            return None
        chosen = best.outcome if best else outcomes[-1]
        notes = [chosen.reason] if chosen.reason else []
        if on_top is not None:
            notes.append(f"measured on top of {on_top.knob.id} ({on_top.trial.name}); the gain is the increment over that trial")
        if len(outcomes) > 1:
            notes.append(f"best of {len(outcomes)} variants")
        chosen.reason = "; ".join(notes) or None
        self.sweep.knobs.append(chosen)
        return best

    def micro_batch(self, overall_knob: Knob | None, preserving_knob: Knob | None) -> MicroBatchResult:
        """Search once; report the fastest point overall (``micro_batch``, flagged when it changes the global
        batch) and the fastest point that keeps the user's global batch through accumulation (``grad_accum``)."""
        max_factor = 64 if self.ctx.cuda else 4  # CPU: no memory wall to find, so keep the search short
        result = search_micro_batch(self.measure, self.ctx.base, self.baseline, max_factor=max_factor, may_continue=self.may_continue)
        self.sweep.micro_batch = result.points
        preserving = result.best(preserve_global=self.ctx.base.samples_per_step)
        overall = result.best(preserve_global=None)
        for knob, best in ((overall_knob, overall), (preserving_knob, preserving)):
            if knob is None:
                continue
            if best is None or best is self.baseline:
                self._outcome(knob, "measured", result.stopped or "the user's micro-batch is already the fastest",
                              trial=self.baseline.name, gain=measured_gain(self.baseline, self.baseline))
                continue
            outcome = self._judge(knob, best, TrialConfig.from_dict(best.config))
            notes = [outcome.reason] if outcome.reason else []
            notes.append(f"micro-batch {best.config['micro_batch_size']} × accumulation {best.config['grad_accum_steps']}")
            if result.stopped:
                notes.append(result.stopped)
            if knob is overall_knob and preserving is not None and preserving is not overall and preserving is not self.baseline:
                notes.append(f"keeping the global batch, micro-batch {preserving.config['micro_batch_size']} is the fastest (grad_accum)")
            outcome.reason = "; ".join(notes)
            self.sweep.knobs.append(outcome)
        return result

    def checkpointing_pair(self, knob: Knob, result: MicroBatchResult) -> None:
        """Checkpointing at twice the largest micro-batch that fit without it (it only pays through memory)."""
        largest = result.largest_fitting() or self.ctx.base.micro_batch_size
        micro = largest * 2
        config = knob.apply(self.ctx.base, {"activation_checkpointing": True}).replace(micro_batch_size=micro, grad_accum_steps=1)
        if micro <= self.ctx.base.samples_per_step and self.ctx.base.samples_per_step % micro == 0:
            config = config.replace(grad_accum_steps=self.ctx.base.samples_per_step // micro)
        if not self.may_continue():
            return
        trial = self.measure(f"{CHECKPOINTING}-mb{micro}", config, [CHECKPOINTING, MICRO_BATCH])
        outcome = self._judge(knob, trial, config)
        outcome.reason = f"paired with micro-batch {micro} (no checkpointing: OOM above {largest})"
        outcome.changes_semantics += self.knob_by_id(MICRO_BATCH).changes_semantics(self.ctx, config)
        self.sweep.knobs.append(outcome)

    @staticmethod
    def knob_by_id(knob_id: str) -> Knob:
        return next(k for k in REGISTRY if k.id == knob_id)

    def stack(
        self, candidates: list[_Candidate], grad_accum_search: MicroBatchResult | None
    ) -> tuple[TrialConfig, Trial, list[str], list[str]]:
        """Greedy: the best winner first, then each next winner only if it speeds the stack up significantly.
        Returns the stacked config, the trial that measured it, the accepted knob ids and their semantics.

        Candidates that change the global batch never join (the recommendation preserves semantics); a knob
        measured on top of another joins only after it. The micro-batch (with accumulation, same global batch)
        joins last — re-searched on the stack when the search was memory-limited and the stack changed memory.
        """
        winners = sorted(
            (c for c in candidates
             if is_win(c.outcome.gain) and c.trial.metrics is not None and c.trial.metrics.samples_per_step == self.ctx.base.samples_per_step),
            key=lambda c: -c.outcome.gain.ratio,  # type: ignore[union-attr]
        )
        config, current, accepted, semantics = self.ctx.base, self.baseline, [], []
        touched: set[str] = set()
        pending = list(winners)
        progressed = True
        while pending and progressed:  # a knob waiting for its prerequisite gets another pass once it is in
            progressed = False
            for cand in list(pending):
                if cand.requires is not None and cand.requires not in accepted:
                    continue
                pending.remove(cand)
                progressed = True
                fields = set(cand.changes)
                if fields & touched:  # e.g. bf16 and fp16 both set precision: the better one is already in
                    continue
                new_config = cand.knob.apply(config, cand.changes)
                if not accepted and cand.requires is None:
                    trial = cand.trial
                else:
                    if not self.may_continue():
                        pending.clear()
                        break
                    trial = self.measure(f"stack{len(accepted) + 1}-{cand.knob.id}", new_config, [*accepted, cand.knob.id])
                    if not trial.ok or not compare_numerics(self.baseline, trial).ok:
                        continue
                    if not is_win(measured_gain(current, trial, drift=self.drift), self.options.min_stack_gain):
                        continue
                config, current = new_config, trial
                accepted.append(cand.knob.id)
                semantics += cand.outcome.changes_semantics
                touched |= fields
        if grad_accum_search is not None:
            config, current = self._stack_micro_batch(grad_accum_search, config, current, accepted)
        return config, current, accepted, semantics

    def _stack_micro_batch(self, micro: MicroBatchResult, config: TrialConfig, current: Trial, accepted: list[str]) -> tuple[TrialConfig, Trial]:
        memory_limited = micro.hit_oom or (micro.stopped or "").endswith("of device memory")
        changes_memory = config.precision != self.ctx.base.precision or config.activation_checkpointing != self.ctx.base.activation_checkpointing
        if memory_limited and changes_memory and current is not self.baseline and self.may_continue():
            # bf16 halves activations, checkpointing drops most of them: the micro-batch that fits has moved.
            research = search_micro_batch(self.measure, config, current, name_prefix="stack-mb", knobs=accepted,
                                          max_factor=64, may_continue=self.may_continue)
            best = research.best(preserve_global=self.ctx.base.samples_per_step)
            fits = research.largest_fitting()
            self.sweep.notes.append(f"micro-batch re-searched on the stack ({', '.join(accepted)}): fits up to {fits}"
                                    + (f" ({research.stopped})" if research.stopped else ""))
            if best is not None and best is not current and best.ok and compare_numerics(self.baseline, best).ok \
                    and is_win(measured_gain(current, best, drift=self.drift), self.options.min_stack_gain):
                accepted.append(GRAD_ACCUM)
                return TrialConfig.from_dict(best.config).replace(capture_trace=False), best
            return config, current
        best = micro.best(preserve_global=self.ctx.base.samples_per_step)
        if best is None or best is self.baseline or not self.may_continue():
            return config, current
        new_config = config.replace(micro_batch_size=best.config["micro_batch_size"], grad_accum_steps=best.config["grad_accum_steps"])
        if accepted:
            trial = self.measure(f"stack{len(accepted) + 1}-{GRAD_ACCUM}", new_config, [*accepted, GRAD_ACCUM])
        else:
            trial = best
        if trial.ok and compare_numerics(self.baseline, trial).ok and is_win(measured_gain(current, trial, drift=self.drift), self.options.min_stack_gain):
            accepted.append(GRAD_ACCUM)
            return new_config, trial
        return config, current

    def measure_drift(self) -> None:
        """Re-run the baseline in a fresh process: the noise floor every gain must clear."""
        if not self.may_continue():
            return
        config = TrialConfig.from_dict(self.baseline.config).replace(capture_trace=False)
        repeat = self.measure(f"{self.baseline.name}-repeat", config, [])
        if repeat.ok:
            self.drift = process_drift(self.baseline, repeat)
            self.sweep.notes.append(
                f"process-to-process drift (baseline re-run in a fresh process): {self.drift:.1%}; "
                "every gain's interval is widened by it"
            )

    def run(self) -> Sweep:
        self.measure_drift()
        candidates: dict[str, _Candidate] = {}
        search_knobs: dict[str, Knob] = {}
        deferred_checkpointing: Knob | None = None
        for knob in REGISTRY:
            inapplicable, unselected = knob.applies(self.ctx), self.selected(knob)
            if inapplicable is not None:
                self._outcome(knob, "inapplicable", inapplicable)
            elif unselected is not None:
                self._outcome(knob, "skipped", unselected)
            elif knob.search:
                search_knobs[knob.id] = knob
            elif knob.id == CHECKPOINTING and self.ctx.cuda and not ({MICRO_BATCH, GRAD_ACCUM} <= set(self.options.skip)):
                deferred_checkpointing = knob  # on a GPU it pays only through memory: measured with the micro-batch search
            elif knob.builds_on is not None and not knob.prerequisite_met(self.ctx.base):
                prerequisite = candidates.get(knob.builds_on)
                if prerequisite is None:
                    self._outcome(knob, "skipped", f"needs {knob.builds_on}, which produced no acceptable trial to build on")
                    continue
                candidate = self.try_alone(knob, on_top=prerequisite)
                if candidate is not None:
                    candidates[knob.id] = candidate
            else:
                candidate = self.try_alone(knob)
                if candidate is not None:
                    candidates[knob.id] = candidate
        micro: MicroBatchResult | None = None
        if search_knobs and self.may_continue():
            micro = self.micro_batch(search_knobs.get(MICRO_BATCH), search_knobs.get(GRAD_ACCUM))
        elif search_knobs:
            for knob in search_knobs.values():
                self._outcome(knob, "skipped", self.sweep.stopped_early or "budget exhausted")
        if deferred_checkpointing is not None:
            if micro is not None and micro.hit_oom:
                self.checkpointing_pair(deferred_checkpointing, micro)
            else:
                largest = micro.largest_fitting() if micro else None
                self._outcome(deferred_checkpointing, "skipped",
                              f"memory did not limit the micro-batch (fits up to {largest}): checkpointing would only add recompute"
                              if largest else "needs the micro-batch search, which did not run")
        # The micro-batch joins the stack only through grad_accum (same global batch), when it was searched for.
        self.recommend(list(candidates.values()), micro if GRAD_ACCUM in search_knobs else None)
        self.sweep.knobs.sort(key=_rank_key)
        self.sweep.elapsed_s = self.elapsed() - self.start
        return self.sweep

    def recommend(self, candidates: list[_Candidate], grad_accum_search: MicroBatchResult | None) -> None:
        config, stacked, accepted, semantics = self.stack(candidates, grad_accum_search)
        if not accepted:
            self.sweep.recommended_trial = self.baseline.name
            self.sweep.notes.append("no knob made the baseline significantly faster: the baseline is the recommendation")
            return
        if not self.may_continue():
            self.sweep.notes.append("the budget ran out before the recommended configuration could be re-measured")
            return
        trial = self.measure("recommended", config.replace(capture_trace=self.options.trace_recommended), accepted)
        gain = measured_gain(self.baseline, trial, drift=self.drift) if trial.ok else None
        if trial.ok and is_win(gain) and compare_numerics(self.baseline, trial).ok:
            self.sweep.recommended_trial, self.sweep.recommended_knobs, self.sweep.recommended_gain = trial.name, accepted, gain
            if semantics:
                self.sweep.notes.append("the recommended configuration changes training semantics: " + "; ".join(dict.fromkeys(semantics)))
        else:
            self.sweep.recommended_trial = self.baseline.name
            why = trial.status if not trial.ok else "not significantly faster than the baseline when re-measured"
            self.sweep.notes.append(f"the stacked configuration ({', '.join(accepted)}) was {why}: the baseline is the recommendation")
            if trial.ok and gain is not None and stacked.ok and stacked is not self.baseline:
                earlier = measured_gain(self.baseline, stacked, drift=self.drift)
                # The same configuration measured twice, in two processes, disagreeing: the machine's run-to-run
                # noise is larger than the baseline re-run showed; say so rather than pick the luckier run.
                self.sweep.notes.append(
                    f"the same configuration measured {earlier.ratio:.2f}× in {stacked.name} and {gain.ratio:.2f}× when "
                    f"re-measured ({process_drift(stacked, trial):.0%} apart): this machine's run-to-run noise exceeds "
                    f"the {self.drift:.1%} drift of the baseline re-run"
                )


def _rank_key(outcome: KnobOutcome) -> tuple[int, float]:
    order = {"measured": 0, "rejected": 2, "failed": 3, "skipped": 4, "inapplicable": 5}
    if outcome.status == "measured" and is_win(outcome.gain):
        return (0, -outcome.gain.ratio)  # type: ignore[union-attr]
    if outcome.status == "measured":
        return (1, -(outcome.gain.ratio if outcome.gain else 0.0))
    return (order[outcome.status], 0.0)


def run_sweep(session: Any, workload: Workload, base_config: TrialConfig, options: SweepOptions) -> Sweep:
    """Entry point from `perfscope analyze`: builds the knob context and runs the sweep through the session."""
    baseline = session.results.trial("baseline")
    # Exploration trials run without the profiler: traces are for the baseline and the recommendation.
    ctx = KnobContext(workload=workload, base=base_config.replace(capture_trace=False), environment=session.results.environment, model=ModelFacts.inspect(workload))
    sweep = Sweep(baseline_trial=baseline.name)
    session.results.sweep = sweep  # saved with every trial, so an interrupted sweep keeps what it found
    sweeper = Sweeper(measure=lambda name, cfg, knobs: session.measure(name, cfg, knobs), ctx=ctx, baseline=baseline,
                      options=options, elapsed=session.progress.elapsed, sweep=sweep)
    return sweeper.run()

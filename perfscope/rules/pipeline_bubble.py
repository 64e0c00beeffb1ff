from __future__ import annotations

from perfscope.results import Finding
from perfscope.results.layout import bubble_formula
from perfscope.rules._distributed import model_parallel_runs
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.wording import words


class PipelineBubble(Rule):
    """The pipeline idles in its bubble: too few micro-batches for its stages.

    Anti-pattern: a pipeline of p stages fed m micro-batches with m close to p: every rank waits (p − 1) slots
    while the pipeline fills and drains, (p − 1) / (m + p − 1) of the step — a third of it at p = 2, m = 2. Best
    practice: at least 4 × p micro-batches (the same global batch in smaller micro-batches), or an interleaved
    schedule (ScheduleInterleaved1F1B: v stages per rank divide the bubble by v); 1F1B keeps activation memory
    at p micro-batches instead of m, so more micro-batches cost no memory.
    """

    id = "PS807"
    name = "pipeline-bubble"
    doc = RuleDoc(
        detects="the pipeline idles for lack of micro-batches",
        threshold="a PP run's bubble (measured, else the formula; the replay when the run was loaded) > 15 % with fewer "
                  "than 4 × p micro-batches",
        evidence="`ParallelFacts`: the measured bubble, (p − 1) / (m + p − 1), the bubble replayed from the stages' "
                 "compute, stage imbalance",
        fix="`n_microbatches = 4 × p` with Schedule1F1B (same global batch), or ScheduleInterleaved1F1B",
        gain="not quantified; the formula at 4 × p stated",
        guard="silent with ≥ 4 × p micro-batches (a bubble left is imbalance or communication, named by the replay)",
    )
    groups = ("distributed",)
    addresses = ("idle",)
    """The bubble is time each rank's device sits idle."""
    threshold: float = 0.15
    """Fire when the bubble (measured, else the formula) passes this share of the step ..."""
    per_stage: int = 4
    """... with fewer than this many micro-batches per stage."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        for trial in model_parallel_runs(ctx, pp=True):
            facts = trial.metrics.distributed.parallel if trial.metrics and trial.metrics.distributed else None
            if facts is None or not facts.microbatches or facts.bubble_formula is None:
                continue
            p, m = facts.pipeline_parallel, facts.microbatches
            loaded = trial.metrics.contention  # the wall-clock bubble holds the neighbours' load: quote the replay
            if loaded and facts.bubble_replayed is not None:
                bubble = facts.bubble_replayed
            else:
                bubble = facts.bubble_measured if facts.bubble_measured is not None else facts.bubble_formula
            if bubble <= self.threshold or m >= self.per_stage * p:
                continue
            target = self.per_stage * p
            evidence = [f"{trial.configuration}: {p} stages, {m} micro-batches ({facts.schedule}): the bubble is "
                        + (f"{pct(facts.bubble_measured)} of the step measured (each rank's step less its own compute)"
                           if facts.bubble_measured is not None else "not measured")
                        + (f", under load ({words(loaded[0])})" if loaded and facts.bubble_measured is not None else "")
                        + f"; (p − 1) / (m + p − 1) = {pct(facts.bubble_formula)}"]
            if facts.bubble_replayed is not None:
                evidence.append(f"replayed from the stages' own compute (no communication, no load): {pct(facts.bubble_replayed)}"
                                + (": the figure quoted, the wall clock being loaded" if loaded else ""))
            if facts.stage_imbalance is not None and facts.stage_imbalance > 0.1:
                evidence.append(f"the stages are unequal: the busiest rank computes {pct(facts.stage_imbalance)} more than the mean")
            evidence.append(f"{target} micro-batches bring the formula to {pct(bubble_formula(p, target))}")
            batch = trial.config.micro_batch_size * m
            cls = {"1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}.get(facts.schedule or "", "ScheduleGPipe")
            fix = (f"-schedule = {cls}(stage, n_microbatches={m}, loss_fn=loss_fn)\n"
                   f"+schedule = Schedule1F1B(stage, n_microbatches={target}, loss_fn=loss_fn)   # {batch} samples as {target} "
                   f"micro-batches of {max(batch // target, 1)}; 1F1B holds only {p} in flight\n"
                   "+# or ScheduleInterleaved1F1B(stages, ...) with 2 stages per rank: the bubble ÷ 2")
            return [Finding(rule_id=self.id, title=f"The pipeline idles {pct(bubble)} of its step: {m} micro-batches for {p} stages",
                            severity="high" if bubble >= 0.3 else "medium", evidence=evidence, fix=fix,
                            reference="https://pytorch.org/docs/stable/distributed.pipelining.html")]
        return []

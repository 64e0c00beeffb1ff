from __future__ import annotations

from perfscope.results import Finding, KnobOutcome, Trial, msg
from perfscope.rules._text import gib, held_at_peak, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import lean_optimizer_change

LEAN_OPTIMIZER_KNOBS = ("adafactor", "adamw_8bit")
EIGHT_BIT_FREES = 0.75
"""8-bit moments: 2 B of state per parameter instead of AdamW's 8 (block scales aside)."""


class OptimizerState(Rule):
    """Optimizer state is a large share of memory: shard it or shrink it.

    Anti-pattern: AdamW keeps two fp32 moments per parameter (8 B/param) — for a 1B-parameter model 8 GB,
    more than the weights. Best practice: 8-bit optimizers (torchao, bitsandbytes), Adafactor (factored second
    moment, no first), or ZeRO/FSDP sharding across data-parallel ranks. The sweep measures Adafactor and an
    installed 8-bit AdamW (knobs `adafactor`, `adamw_8bit`): when it did, the finding reports what they freed
    and how fast they ran; otherwise it estimates what they would free.
    """

    id = "PS503"
    name = "optimizer-state"
    doc = RuleDoc(
        detects="optimizer state a large share of memory",
        threshold="≥ 25 % of the peak",
        evidence="memory breakdown; optimizer state's share of a profiled step's peak when the run was profiled by "
                 "category; the `adafactor` / `adamw_8bit` runs when measured",
        fix="8-bit optimizer, Adafactor, sharding",
        gain="measured (state freed, micro-batch unlocked, gain) when the sweep ran a lean optimizer, else the state an "
             "8-bit optimizer would free (75%); limit: 8-bit state frees at most 3/4 of the state, sharding (N−1)/N",
        guard="GPU only; needs the breakdown",
    )
    groups = ("memory",)
    knobs = LEAN_OPTIMIZER_KNOBS
    threshold: float = 0.25
    """Fire when optimizer state is at least this share of the step's peak memory."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        b = ctx.metrics.memory_breakdown
        peak = ctx.metrics.peak_memory_bytes
        if not ctx.cuda or b is None or not peak or b.optimizer_state / peak < self.threshold:
            return []
        per_param = b.optimizer_state / max(b.parameters, 1) * 4  # bytes of state per fp32 parameter
        evidence = [f"optimizer state {gib(b.optimizer_state)} = {pct(b.optimizer_state / peak)} of the peak "
                    f"({per_param:.0f} B per parameter; weights {gib(b.parameters)})"]
        if (held := held_at_peak(ctx.metrics.memory_categories, "optimizer_state")) is not None:
            evidence.append(held)
        finding = Finding(
            rule_id=self.id, title="Optimizer state dominates memory: 8-bit optimizer, Adafactor or ZeRO/FSDP", severity="low",
            evidence=evidence,
            fix=lean_optimizer_change(),
            caveats=[msg("lean_optimizer_state")],
            estimate_bound=(f"the optimizer state itself, {gib(b.optimizer_state)}: 8-bit state frees at most 3/4 of it, "
                            "sharding over N ranks (N−1)/N; activations and weights stay"),
            reference="https://pytorch.org/docs/stable/distributed.optim.html",
        )
        measured = self._measured(ctx)
        if measured is None:
            evidence += [f"estimate: an 8-bit optimizer would free about {gib(b.optimizer_state * EIGHT_BIT_FREES)} (2 of 8 B per "
                         "parameter kept); Adafactor nearly all of it (a row and a column per matrix); ZeRO-1 over N ranks (N−1)/N",
                         "not measured here: the sweep's adafactor / adamw_8bit knobs did not run (see the knob table for why)"]
            return [finding]
        outcome, trial = measured
        finding.estimate_bound = None  # measured, not estimated
        evidence += self._measured_evidence(ctx, outcome, trial)
        finding.title = f"Optimizer state dominates memory: {outcome.title.split(' (')[0]}, measured"
        finding.fix = outcome.code_change or finding.fix
        finding.caveats = list(dict.fromkeys(outcome.changes_semantics or finding.caveats))
        return [self.measured(ctx, finding, outcome.knob)]

    def _measured(self, ctx: RuleContext) -> tuple[KnobOutcome, Trial] | None:
        """The lean-optimizer outcome with a run to read: the fastest measured one, else a rejected one."""
        found = []
        for knob_id in LEAN_OPTIMIZER_KNOBS:
            outcome = ctx.knob(knob_id)
            if outcome is None or outcome.status not in ("measured", "rejected") or outcome.trial is None:
                continue
            trial = ctx.results.trial(outcome.trial)
            if trial is not None and trial.metrics is not None:
                found.append((outcome, trial))
        found.sort(key=lambda ot: (ot[0].status == "measured", ot[0].gain.ratio if ot[0].gain else 0.0), reverse=True)
        return found[0] if found else None

    def _measured_evidence(self, ctx: RuleContext, outcome: KnobOutcome, trial: Trial) -> list[str]:
        m, base = trial.metrics, ctx.metrics
        assert m is not None
        lines = []
        if m.memory_breakdown is not None and base.memory_breakdown is not None:
            before, after = base.memory_breakdown.optimizer_state, m.memory_breakdown.optimizer_state
            lines.append(f"measured ({trial.configuration}{', ' + m.optimizer if m.optimizer else ''}): optimizer state "
                         f"{gib(before)} → {gib(after)}, {gib(before - after)} freed")
        if m.micro_batch_size > base.micro_batch_size:
            lines.append(f"it runs micro-batch {m.micro_batch_size} (the baseline runs {base.micro_batch_size}; "
                         "without it the micro-batch search ran out of memory there)")
        elif m.peak_memory_bytes and base.peak_memory_bytes:
            lines.append(f"peak memory {gib(base.peak_memory_bytes)} → {gib(m.peak_memory_bytes)} at the same micro-batch")
        if outcome.status == "rejected":
            lines.append(f"rejected by the numerics guard: {outcome.reason}")
        return lines

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        return ("its value is the memory it frees, not a faster step: it pays when that memory buys a larger micro-batch "
                "(the sweep pairs it with one when the micro-batch search runs out of memory)")

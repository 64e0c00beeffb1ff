from __future__ import annotations

import re

from perfscope.results import DistributedFacts, Finding, KnobOutcome, ShardingMemory
from perfscope.rules._distributed import distributed_facts
from perfscope.rules._text import gib, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.rules.memory_headroom import MemoryHeadroom, fitting_micro_batch
from perfscope.rules.near_oom import NearOom
from perfscope.snippets import sharding_change

SHARDING_KNOBS = ("zero1", "fsdp2")
"""The sweep's sharding knobs: ZeroRedundancyOptimizer (ZeRO-1) and FSDP2 `fully_shard` (ZeRO-2/3)."""



def stage_of(row: ShardingMemory) -> int:
    """0 for DDP, n for "ZeRO-n ..." (the memory model's strategy names)."""
    match = re.match(r"\s*ZeRO-(\d)", row.strategy)
    return int(match.group(1)) if match else 0


class DataParallelMemory(Rule):
    """Memory-bound data parallelism: every DDP rank holds a full copy of the weights, gradients and optimizer state.

    Anti-pattern: plain DistributedDataParallel near the device's capacity (or with the micro-batch search
    running out of memory) while each of N ranks keeps the whole training state — for a 10B-parameter model
    with AdamW about 80 GB per GPU before one activation. Best practice: shard what is replicated — ZeRO-1
    (`ZeroRedundancyOptimizer`: the optimizer state), ZeRO-2 (FSDP2 without resharding: + gradients), ZeRO-3
    (FSDP2 `fully_shard`: + parameters, ~1.5× DDP's communication) — and spend the memory on a larger
    micro-batch. The lightest stage that frees enough is the one to take: each stage adds communication.
    """

    id = "PS803"
    name = "data-parallel-memory"
    doc = RuleDoc(
        detects="plain DDP near the memory capacity",
        threshold="the fullest rank reserves ≥ 90 % (PS502's threshold), or the micro-batch search ran out of memory",
        evidence="the memory model (`ShardingMemory`: DDP vs ZeRO-1/2/3 per rank, measured where run), the ranks' peaks",
        fix="the lightest ZeRO stage that at least doubles the micro-batch (ZeroRedundancyOptimizer, FSDP2 `fully_shard` "
            "with / without resharding), else the one that unlocks the most",
        gain="measured (`zero1`, `fsdp2`: one finding each, with the micro-batch the run used); limit: the replicated state "
             "the stage frees; the micro-batch that fills 90 % of the device (PS501's)",
        guard="DDP only (FSDP / ZeRO-1 already shard); the capacity check on GPUs only (device memory), the search's OOM on "
              "any device; memory rule, addresses no step slice",
    )
    groups = ("memory", "distributed")
    knobs = SHARDING_KNOBS
    threshold: float = NearOom.threshold
    """Fire when the fullest rank's reserved memory passes this share of device capacity (PS502's near-OOM) ..."""
    usable: float = MemoryHeadroom.usable
    """... and size the micro-batch a stage unlocks to fill this share of device memory (PS501's)."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = distributed_facts(ctx)
        if facts is None or facts.data_parallel != "ddp":
            return []
        m = ctx.metrics
        cap = m.device_memory_capacity_bytes
        used = self.fullest(ctx, facts)
        near = ctx.cuda and bool(cap) and used is not None and used / cap >= self.threshold  # type: ignore[operator]
        sweep = ctx.results.sweep
        ooms = sorted(p.micro_batch_size for p in (sweep.micro_batch if sweep else []) if p.status == "oom")
        if not near and not ooms:
            return []
        evidence = []
        if near:
            evidence.append(f"plain DDP on {facts.world_size} ranks: the fullest rank's memory peaked at {gib(used)} of {gib(cap)} "  # type: ignore[arg-type]
                            f"({pct(used / cap)}) at micro-batch {m.micro_batch_size}")  # type: ignore[operator]
        if ooms:
            evidence.append(f"the micro-batch search ran out of memory at micro-batch {ooms[0]} under plain DDP")
        rows = sorted(facts.memory_model, key=stage_of)
        ddp = next((r for r in rows if stage_of(r) == 0), None)
        pick = None
        if ddp is not None:
            evidence.append("per rank, the memory model: " + "; ".join(
                f"{r.strategy} {gib(r.total)}" + (f" (measured {gib(r.measured_total)})" if r.measured_total is not None else "")
                for r in rows))
            pick = self.pick(ctx, rows, ddp, used)
        stage = stage_of(pick[0]) if pick else 1
        title = f"Memory-bound data parallelism: shard with ZeRO-{stage}"
        finding = Finding(
            rule_id=self.id, title=title, severity="high" if near else "medium", evidence=evidence, fix=sharding_change(stage),
            reference="https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html",
        )
        if pick is not None:
            row, unlocked = pick
            freed = ddp.total - row.total  # type: ignore[union-attr]
            more = f"; about micro-batch {unlocked} would fit in {pct(self.usable)} of the device memory (now {m.micro_batch_size})" if unlocked else ""
            evidence.append(f"{row.strategy} frees {gib(freed)} per rank{more}")
            finding.estimate_bound = (f"device memory {gib(cap)}: sharding frees at most the replicated state, {gib(freed)} per rank under "
                                      f"{row.strategy}; activations stay (the throughput gain is not estimated — the sweep measures it)"
                                      if cap else f"sharding frees at most the replicated state, {gib(freed)} per rank under {row.strategy}")
        else:
            evidence.append("not estimated: the run has no memory model of the sharding stages")
        # One finding per sharding knob the sweep measured (its gain replaces the estimate), else the diagnosis.
        return [self.measured(ctx, Finding(
            rule_id=self.id, title=f"Memory-bound data parallelism: {o.title}, measured", severity=finding.severity,
            evidence=evidence + self.measured_lines(ctx, o), fix=o.code_change or finding.fix, reference=finding.reference),
            o.knob) for k in SHARDING_KNOBS if (o := ctx.measured(k))] or [finding]

    @staticmethod
    def fullest(ctx: RuleContext, facts: DistributedFacts) -> int | None:
        """The fullest rank's memory (every rank must fit), else the job's (rank 0's) reserved or peak."""
        peaks = [r.peak_memory_bytes for r in facts.ranks if r.peak_memory_bytes is not None]
        own = ctx.metrics.peak_reserved_bytes or ctx.metrics.peak_memory_bytes
        return max(peaks + ([own] if own else [])) if peaks or own else None

    def pick(self, ctx: RuleContext, rows: list[ShardingMemory], ddp: ShardingMemory, used: int | None) -> tuple[ShardingMemory, int | None] | None:
        """(the lightest stage whose freed memory at least doubles the micro-batch, else the one that unlocks the most;
        the micro-batch it unlocks) — None when no stage frees anything."""
        m = ctx.metrics
        sharded = [r for r in rows if stage_of(r) > 0 and r.total < ddp.total]
        if not sharded:
            return None

        def unlocked(row: ShardingMemory) -> int | None:
            return fitting_micro_batch(used, ddp.total, m.micro_batch_size, m.device_memory_capacity_bytes, self.usable, row.total)

        for row in sharded:
            u = unlocked(row)
            if u is not None and u >= 2 * m.micro_batch_size:
                return row, u
        best = max(sharded, key=lambda r: (unlocked(r) or 0, ddp.total - r.total))
        return best, unlocked(best)

    @staticmethod
    def measured_lines(ctx: RuleContext, o: KnobOutcome) -> list[str]:
        trial = ctx.results.trial(o.trial or "")
        m, base = (trial.metrics if trial is not None else None), ctx.metrics
        if m is None:
            return []
        lines = [f"measured ({o.trial}{', ' + o.setting if o.setting else ''})"]
        if m.micro_batch_size > base.micro_batch_size:
            lines[0] += f": it runs micro-batch {m.micro_batch_size} (DDP runs {base.micro_batch_size})"
        if m.peak_memory_bytes and base.peak_memory_bytes:
            lines[0] += f", peak memory {gib(base.peak_memory_bytes)} → {gib(m.peak_memory_bytes)}"
        return lines

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        return ("sharding buys memory with communication: it pays when that memory buys a larger micro-batch (or a model that "
                "otherwise does not fit); with a fast step and a slow link the extra all-gathers cost more than they save")

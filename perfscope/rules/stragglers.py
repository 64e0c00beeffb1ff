from __future__ import annotations

from perfscope.results import DistributedFacts, Finding, Straggler
from perfscope.rules._distributed import distributed_facts, median_of_others
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc, up_to

PERSISTENT = 0.8
"""Slowest in at least this share of the steps: the same rank every step (a device, a shard, a host), not chance."""

GC_FIX = ("+import gc\n"
          "+gc.collect(); gc.freeze()   # once, after the model, optimizer and loader are built, on every rank\n"
          "+gc.disable()                # no automatic collection inside a step: one rank's pause stalls every rank\n"
          " for step, batch in enumerate(loader):\n"
          "     ...\n"
          "+    if step % 200 == 0:\n"
          "+        gc.collect()        # at the same step boundary on every rank: the pauses coincide instead of adding up")
DATA_FIX = ("-loader = DataLoader(ds, batch_size=B, sampler=DistributedSampler(ds))\n"
            "+loader = DataLoader(ds, batch_size=B, sampler=DistributedSampler(ds, shuffle=True),\n"
            "+                    num_workers=4, persistent_workers=True)   # workers per rank; shuffled shards cost alike")
HOST_FIX = ("# on {node}: find what else runs there (top -o %CPU) and move it off the training's cores\n"
            "+torchrun --numa-binding node ...          # PyTorch ≥ 2.9: each rank on its NUMA node's CPUs\n"
            "+numactl --cpunodebind=N --membind=N ...    # or per rank, by hand")
GPU_FIX = ("# on {node}: is the device of local rank {local} slow? clocks, thermals, throttle reasons\n"
           "+nvidia-smi -q -d CLOCK,TEMPERATURE,PERFORMANCE -i {local}\n"
           "# a device or node that stays slow: take the node out of the job")
CPU_FIX = ("# on {node}: is the host slow? its CPU frequency, thermal throttling, other load\n"
           "+grep MHz /proc/cpuinfo; cat /sys/class/thermal/thermal_zone*/temp\n"
           "# a node that stays slow: take it out of the job")
UNKNOWN_FIX = "# profile rank {rank} alone: its trace is trace/rank{rank}.json.gz; compare it with a peer's"


class Stragglers(Rule):
    """A rank is slower than its peers: in synchronous data parallelism the slowest rank sets every rank's pace.

    Anti-pattern: one rank that computes slower — a garbage-collection pause, a slow data shard or too few
    DataLoader workers, another process on its host, a throttled or faulty device — makes every other rank
    wait in the gradient all-reduce, every step. Best practice, by cause: GC — `gc.freeze()` after setup and
    `gc.disable()` during steps with `gc.collect()` at the same step boundary on every rank; data — more
    DataLoader workers, shards of equal cost; host contention — keep other processes off the host, bind each
    rank to its NUMA node's CPUs; compute — check the device's clocks and thermals, replace a bad node.
    Whether it is the same rank every step separates a cause on that rank from chance.
    """

    id = "PS802"
    name = "stragglers"
    doc = RuleDoc(
        detects="a rank computes slower than its peers",
        threshold="each `Straggler` in the facts (slower than the others' median beyond its own noise)",
        evidence="the rank's compute step (window without gradient sync) vs the others' median, share of steps it was the "
                 "slowest, its data wait, GC pauses, other load on its host",
        fix="by cause: GC (`gc.freeze()`, `gc.disable()` + `gc.collect()` at the same step boundary on every rank), data "
            "(workers, balanced shards), host contention (other processes, NUMA / affinity), compute (clocks, thermals, a "
            "bad node)",
        gain="estimated (upper bound): the job's step less the straggler's excess compute; bound: that excess (the next "
             "slowest rank takes over)",
        guard="names whether it is the same rank every step or chance (slowest share vs 1 / world size)",
    )
    groups = ("distributed",)
    addresses = ("communication",)

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = distributed_facts(ctx)
        if facts is None:
            return []
        return [self.finding(ctx, facts, s) for s in facts.stragglers]

    def finding(self, ctx: RuleContext, facts: DistributedFacts, s: Straggler) -> Finding:
        rank = facts.rank(s.rank)
        node = rank.node if rank is not None and rank.node else "its host"
        local = rank.local_rank if rank is not None else 0
        chance = 1 / facts.world_size
        if s.slowest_share >= PERSISTENT:
            when = f"the slowest rank in {pct(s.slowest_share)} of the steps: the same rank every step, a cause on that rank"
        elif s.slowest_share > 1.5 * chance:
            when = f"the slowest rank in {pct(s.slowest_share)} of the steps (chance would be {pct(chance)}): often, not always"
        else:
            when = f"the slowest rank in {pct(s.slowest_share)} of the steps, about chance ({pct(chance)}): intermittent hiccups"
        evidence = [f"rank {s.rank} (local rank {local} on {node}) computes {pct(s.slower_by)} slower than the median of the "
                    f"other {facts.world_size - 1} rank(s); every rank waits for it in the gradient collectives", when]
        evidence += self.rank_lines(ctx, facts, s)
        evidence += s.evidence
        if facts.straggler_method:
            evidence.append(f"how stragglers are decided: {facts.straggler_method}")
        cause = s.cause
        title = {"gc": f"Rank {s.rank} straggles: garbage-collection pauses stall every rank",
                 "data": f"Rank {s.rank} straggles: it waits for its data",
                 "host contention": f"Rank {s.rank} straggles: other processes compete for its host's CPUs",
                 "compute": f"Rank {s.rank} straggles: a slow device or node",
                 }.get(cause, f"Rank {s.rank} is a straggler ({pct(s.slower_by)} slower)")
        fix = {"gc": GC_FIX, "data": DATA_FIX, "host contention": HOST_FIX.format(node=node),
               "compute": (GPU_FIX if ctx.cuda else CPU_FIX).format(node=node, local=local)}.get(cause, UNKNOWN_FIX.format(rank=s.rank))
        extra = {"gc": ["host"], "data": ["data_wait"], "host contention": ["host"]}.get(cause, [])
        severity = "high" if s.slower_by >= 0.2 and s.slowest_share >= 0.5 else "medium" if s.slower_by >= 0.05 else "low"
        f = Finding(rule_id=self.id, title=title, severity=severity, evidence=evidence, fix=fix,
                    addresses=["communication", *extra],
                    reference="https://pytorch.org/docs/stable/notes/ddp.html")
        self.estimate(f, facts, s)
        return f

    @staticmethod
    def rank_lines(ctx: RuleContext, facts: DistributedFacts, s: Straggler) -> list[str]:
        """What the straggler's own measurement says beside its peers': compute, data wait, GC, other load."""
        rank = facts.rank(s.rank)
        if rank is None:
            return []
        others = [r for r in facts.ranks if r.rank != s.rank]
        lines = []
        own, (peers, what) = rank.mean_local_step_time_s, median_of_others(facts, s.rank)
        if own is not None and peers is not None:
            lines.append(f"its compute step {ms(own)} against the others' median {ms(peers)} ({what})")
        waits = [r.data_wait_share for r in others]
        if waits and rank.data_wait_share > max(waits) + 0.02:
            lines.append(f"it waits for data {pct(rank.data_wait_share)} of its step (the others at most {pct(max(waits))})")
        if rank.gc_pause_s is not None and rank.steps:
            lines.append(f"{rank.gc_collections or 0} GC collection(s), {ms(rank.gc_pause_s)} in pauses over its {rank.steps} steps")
        if rank.other_cpu_cores is not None:
            lines.append(f"other processes used {rank.other_cpu_cores:.1f} core(s) on its host during its window")
        return lines

    @staticmethod
    def estimate(f: Finding, facts: DistributedFacts, s: Straggler) -> None:
        """Upper bound: the straggler computing at its peers' median pace shortens the job's step by its excess."""
        rank = facts.rank(s.rank)
        steps = [r.mean_step_time_s for r in facts.ranks if r.mean_step_time_s]
        peers, what = median_of_others(facts, s.rank)
        if rank is None or not steps or peers is None:
            return
        own = rank.mean_local_step_time_s
        excess = (own - peers) if own is not None else s.slower_by * peers
        job = max(steps)  # the cause, measured: the straggler's excess compute, a share of the job's step
        up_to(f, excess / job, f"rank {s.rank} computing at the other ranks' median pace ({what}): the job's step "
              f"({ms(job)}, the slowest rank's wall / steps) less its excess of {ms(excess)}; assumes the next slowest rank "
              "does not take its place",
              f"rank {s.rank}'s excess compute, {ms(excess)} per step: the job cannot run faster than its next slowest rank")

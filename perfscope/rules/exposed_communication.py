from __future__ import annotations

from perfscope.results import CommunicationFacts, DistributedFacts, Finding, KnobOutcome
from perfscope.rules._distributed import distributed_facts
from perfscope.rules._precision import bf16_capable
from perfscope.rules._text import mib, ms, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc, up_to
from perfscope.wording import words

COMM_KNOBS = ("no_sync_accumulation", "ddp_bucket_cap", "grad_compression")
"""The sweep's knobs that cut or hide gradient communication, in the order the fix lists them."""
SLOW_LINK = 0.5
"""Achieved bus bandwidth below this share of the micro-benchmark's: the collective waits rather than moves bytes."""

NO_SYNC = (" for i, micro in enumerate(micro_batches):   # accumulation: one gradient all-reduce per optimizer step\n"
           "-    loss_fn(model(micro)).backward()\n"
           "+    last = i == len(micro_batches) - 1\n"
           "+    with contextlib.nullcontext() if last else model.no_sync():   # skip the all-reduce but on the last micro-batch\n"
           "+        loss_fn(model(micro)).backward()")
FSDP_NO_SYNC = (" for i, micro in enumerate(micro_batches):   # accumulation: one reduce-scatter per optimizer step\n"
                "+    model.set_requires_gradient_sync(i == len(micro_batches) - 1)\n"
                "     loss_fn(model(micro)).backward()")
BUCKET = ("-model = DistributedDataParallel(model)\n"
          "+model = DistributedDataParallel(model, bucket_cap_mb=100)   # fewer, larger all-reduces (default 25 MB); try 50–200")
COMPRESSION = ("+from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
               "+model.register_comm_hook(None, default_hooks.bf16_compress_hook)   # half the bytes on the wire (numerics change)")
FIXES = {"no_sync_accumulation": NO_SYNC, "ddp_bucket_cap": BUCKET, "grad_compression": COMPRESSION}
NOT_GRADIENT = ("all_to_all", "moe_dispatch", "moe_combine", "send", "recv", "send_recv")
"""Collectives that are not gradient synchronization: their fix is overlap or layout, not DDP's knobs."""
KIND_FIX = {
    "moe": ("Exposed MoE all-to-all (expert dispatch/combine): overlap it with compute",
            " # MoE token dispatch/combine (an all-to-all per MoE layer) waits with nothing beside it\n"
            "+# overlap it: split the batch in two and run one half's dispatch/combine under the other's expert compute\n"
            "+# (DeepEP: low-latency mode with its receive hook; Megatron: --overlap-moe-expert-parallel-comm)\n"
            "+# keep expert parallelism inside a node (NVLink) where it fits, and cap tokens per expert (capacity factor)",
            "https://github.com/deepseek-ai/DeepEP"),
    "embedding": ("Exposed embedding all-to-all: pipeline the sparse features' distribution",
                  "-for batch in loader: loss = model(batch); loss.backward(); opt.step()\n"
                  "+pipeline = TrainPipelineSparseDist(model, opt, device)   # torchrec: the next batch's input all-to-all\n"
                  "+while True: pipeline.progress(loader_iter)                # overlaps this batch's dense compute",
                  "https://pytorch.org/torchrec/"),
    "all_to_all": ("Exposed all-to-all: overlap it with compute", " # an all-to-all the step waits on\n"
                   "+# issue it asynchronously (dist.all_to_all_single(..., async_op=True)) and wait just before its result is used;\n"
                   "+# split the batch so one part's all-to-all runs under the other's compute", 
                   "https://pytorch.org/docs/stable/distributed.html"),
    "send": ("Exposed pipeline send/recv: more micro-batches, an interleaved schedule",
             "+# pipeline parallelism: point-to-point sends wait between stages\n"
             "+schedule = ScheduleInterleaved1F1B(stages, n_microbatches=4 * len(stages))   # torch.distributed.pipelining\n"
             "+# more micro-batches per flush and virtual stages keep every stage computing while it sends",
             "https://pytorch.org/docs/stable/distributed.pipelining.html"),
}


class ExposedCommunication(Rule):
    """Gradient communication is exposed: the step waits for collectives no compute hides.

    Anti-pattern: an all-reduce (DDP) or reduce-scatter / all-gather (FSDP) after every micro-batch, in buckets
    too small to fill the link, with nothing left to overlap them with at the end of backward. Best practice:
    accumulate gradients locally and synchronize once per optimizer step (DDP `no_sync()`, FSDP2
    `set_requires_gradient_sync(False)`), size DDP's buckets (`bucket_cap_mb`) so they overlap with backward
    and fill the link, keep overlap intact (`static_graph=True`, no `find_unused_parameters`), and where the
    link itself is the limit send fewer bytes (bf16 / PowerSGD communication hooks, a numerics change).
    The achieved bus bandwidth against a micro-benchmark of the same collective says which: far below it, the
    collectives wait (a straggler, small buckets); near it, the link is full.
    """

    id = "PS801"
    name = "exposed-communication"
    doc = RuleDoc(
        detects="the step waits for collectives no compute hides",
        threshold="exposed collective time ≥ 10 % of the traced step",
        evidence="the baseline's `DistributedFacts.communication` (rank's trace): compute, collective, exposed time per "
                 "step, overlap %, per op the achieved vs micro-benchmark bus bandwidth",
        fix="by the collectives' kind: for gradient all-reduce, DDP `no_sync()` accumulation (FSDP2 "
            "`set_requires_gradient_sync`), `bucket_cap_mb`, overlap kept (`static_graph`), bf16 (fp16 below compute "
            "capability 8.0) / PowerSGD comm hooks; for MoE dispatch/combine, embedding all-to-all or pipeline send/recv, "
            "the fix of that kind (never DDP buckets)",
        gain="measured (`no_sync_accumulation`, `ddp_bucket_cap`, `grad_compression`: one finding each); else estimated for "
             "the unmeasured fixes: 1 / (1 − exposed share); bound: the exposed collective time",
        guard="data-parallel runs only; says when stragglers make part of the exposed time waiting, and whether the link is "
              "full (achieved ≈ micro-benchmark) or the collectives wait",
    )
    groups = ("distributed",)
    knobs = COMM_KNOBS
    addresses = ("communication",)
    threshold: float = 0.10
    """Fire when the exposed collective time is at least this share of the traced step."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = distributed_facts(ctx)
        comm = facts.communication if facts is not None else None
        if facts is None or comm is None or comm.step_s <= 0:
            return []
        share = comm.exposed_collective_s / comm.step_s
        if share < self.threshold:
            return []
        evidence = self.evidence(facts, comm, share)
        severity = "high" if share >= 0.3 else "medium"
        kind = comm.collectives[0].op if comm.collectives else ""
        if kind in NOT_GRADIENT:  # an all-to-all or a send/recv: DDP's buckets and no_sync do not touch it
            return [self.other_kind(ctx, kind, comm, share, evidence, severity)]
        fsdp = facts.data_parallel == "fsdp"
        findings = [self.measured(ctx, Finding(
            rule_id=self.id, title=f"Exposed communication: {o.title}, measured", severity=severity, evidence=list(evidence),
            fix=o.code_change or self.fix_text(ctx, [o.knob], fsdp), reference="https://pytorch.org/docs/stable/notes/ddp.html"),
            o.knob) for k in COMM_KNOBS if (o := ctx.measured(k))]
        if any(f.measured_win for f in findings):
            return findings
        # The fixes nobody measured (or all, when none was): an estimate bounded by the exposed share of the step.
        left = [k for k in COMM_KNOBS if not ctx.measured(k) and k not in self.already_on(ctx, fsdp)]
        f = Finding(rule_id=self.id, title="Exposed communication: accumulate with no_sync, size the buckets, overlap",
                    severity=severity, evidence=list(evidence), fix=self.fix_text(ctx, left, fsdp),
                    reference="https://pytorch.org/docs/stable/notes/ddp.html")
        if "no_sync_accumulation" in left:
            accum = ctx.metrics.grad_accum_steps
            if "grad_accum_steps" in ctx.baseline.unknown_settings:  # a trace does not say how the loop accumulates
                f.evidence.append("with k micro-batches per optimizer step, synchronizing gradients on the last one only "
                                  "(no_sync on the others) makes one all-reduce serve k micro-batches")
            else:
                f.evidence.append(f"the loop synchronizes gradients on each of its {accum} micro-batch(es) per optimizer step" if accum > 1 else
                                  "one micro-batch per optimizer step: no_sync needs accumulation (k micro-batches of 1/k the size keep the "
                                  "global batch), then one all-reduce serves k micro-batches")
        if left:
            self.estimate(f, comm, share)
        else:
            f.title = "Exposed communication: the measured fixes did not help here"
            f.evidence.append("no_sync accumulation, bucket size and compression were measured on this machine and none was "
                              "decidedly faster (see the knob table)")
        return findings + [f]

    @staticmethod
    def estimate(f: Finding, comm: CommunicationFacts, share: float) -> Finding:
        """Up to every exposed collective hidden: the cause measured in the trace, the exposed share of the step."""
        return up_to(f, share, f"every exposed collective hidden behind compute or removed, 1 / (1 − exposed share of the "
                     f"step); from rank {comm.rank}'s trace ({comm.source or 'profiled steps'}); assumes the compute keeps "
                     "its speed and no collective becomes slower", f"the exposed collective time: {ms(comm.exposed_collective_s)} "
                     f"of the {ms(comm.step_s)} traced step ({pct(share)}): no communication fix can save more")

    @staticmethod
    def other_kind(ctx: RuleContext, kind: str, comm: CommunicationFacts, share: float, evidence: list[str],
                   severity: str) -> Finding:
        """The finding for exposed communication that is not gradient synchronization, its fix fit to the kind."""
        embedding = bool(ctx.facts and ctx.facts.kernels.time_by_category.get("embedding"))
        key = ("moe" if kind.startswith("moe_") else "embedding" if kind == "all_to_all" and embedding
               else "all_to_all" if kind == "all_to_all" else "send")
        title, fix, reference = KIND_FIX[key]
        return ExposedCommunication.estimate(Finding(
            rule_id=ExposedCommunication.id, title=title, severity=severity,
            evidence=evidence + [f"the largest collective is {kind.replace('_', ' ')}: not gradient synchronization, so "
                                 "DDP's bucket size, no_sync and gradient compression do not change it"],
            fix=fix, reference=reference), comm, share)

    @staticmethod
    def evidence(facts: DistributedFacts, comm: CommunicationFacts, share: float) -> list[str]:
        overlap = f", {pct(comm.overlap_share)} of it overlapped with compute" if comm.overlap_share is not None else ""
        lines = [f"rank {comm.rank}'s traced step: {ms(comm.step_s)}, compute {ms(comm.compute_s)}, collectives "
                 f"{ms(comm.collective_s)}{overlap}; {ms(comm.exposed_collective_s)} exposed ({pct(share)} of the step, "
                 f"{facts.world_size} ranks, {facts.backend or 'unknown backend'}, {facts.data_parallel})"]
        ratios = []
        for c in comm.collectives:
            payload = f", {mib(c.bytes_per_step)}" if c.bytes_per_step is not None else ""
            line = f"{c.op}: {c.calls_per_step:g} call(s), {ms(c.time_s_per_step)}{payload} per step"
            if c.bus_gbps is not None:
                line += f"; achieved bus bandwidth {c.bus_gbps:.1f} GB/s"
                if c.microbench_bus_gbps:
                    ratio = c.bus_gbps / c.microbench_bus_gbps
                    ratios.append(ratio)
                    line += f" vs {c.microbench_bus_gbps:.1f} GB/s alone in the micro-benchmark ({pct(ratio)} of it)"
            lines.append(line)
        if ratios and max(ratios) < SLOW_LINK:
            lines.append("the collectives reach well under what the link does alone: they wait more than they move bytes "
                         "(for a slower rank — see the straggler findings — or on many small buckets)")
        elif ratios:
            lines.append("the collectives run near what the link does alone: the link is the limit; send fewer bytes "
                         "(synchronize once per optimizer step, compress) or hide them behind backward")
        if facts.stragglers:
            lines.append(f"rank(s) {', '.join(str(s.rank) for s in facts.stragglers)} straggle: the others wait for them inside "
                         "their collectives, so part of this exposed time is waiting, not communication")
        lines += [words(n) for n in comm.notes]
        return lines

    @staticmethod
    def already_on(ctx: RuleContext, fsdp: bool) -> set[str]:
        """Fixes the baseline already runs (never advised again), and the DDP-only ones under FSDP."""
        on = {"no_sync_accumulation"} if ctx.config("no_sync", False) else set()
        if ctx.config("comm_hook") is not None:
            on.add("grad_compression")
        return on | ({"ddp_bucket_cap", "grad_compression"} if fsdp else set())

    @staticmethod
    def fix_text(ctx: RuleContext, knobs: list[str], fsdp: bool) -> str:
        # bf16 gradients on the wire where the device has bf16 (compute capability 8.0+, or unknown); fp16 before.
        bf16 = not (ctx.cuda and bf16_capable(ctx.results.environment.compute_capability) is False)
        order = ("ddp_bucket_cap", "grad_compression", "no_sync_accumulation")  # the wrapper's lines, then the loop's
        parts = [FSDP_NO_SYNC if fsdp and k == "no_sync_accumulation" else
                 FIXES[k] if bf16 or k != "grad_compression" else COMPRESSION.replace("bf16_compress_hook", "fp16_compress_hook")
                 for k in order if k in knobs]
        parts.append(" # keep backward's overlap: static_graph=True when the used parameters never change, no find_unused_parameters")
        return "\n".join(parts)

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        return ("it shortens only the exposed communication; here the collectives were hidden well enough (or waited for a "
                "slower rank) that moving fewer bytes did not shorten the step; on a slower interconnect or with more ranks it pays more")

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules._text import gib, held_at_peak, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import checkpoint_change


@dataclass
class NearOom(Rule):
    """Memory is nearly full: one longer sequence away from an OOM.

    Anti-pattern: running at > 90% of device memory leaves the allocator retrying cudaMalloc and makes any
    input variation an OOM. Best practice: activation checkpointing of the repeated blocks (trade ~33% more
    compute for activation memory), gradient accumulation with a smaller micro-batch, or expandable segments.
    """

    id = "PS502"
    name = "near-oom"
    doc = RuleDoc(
        detects="memory nearly full",
        threshold="reserved ≥ 90 %",
        evidence="peak, reserved, capacity, memory breakdown; activations' share of a profiled step's peak when the run "
                 "was profiled by category",
        fix="activation checkpointing",
        gain="measured (`activation_checkpointing`); limit: checkpointing frees at most the activations and temporaries, "
             "for one more forward",
        guard="GPU only",
    )
    groups = ("memory",)
    knobs = ("activation_checkpointing",)
    threshold: float = 0.9
    """Fire when reserved memory passes this share of device capacity."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        m = ctx.metrics
        used = m.peak_reserved_bytes or m.peak_memory_bytes
        if not ctx.cuda or not used or not m.device_memory_capacity_bytes:
            return []
        share = used / m.device_memory_capacity_bytes
        if share < self.threshold:
            return []
        finding = Finding(
            rule_id=self.id, title="Near OOM: checkpoint activations or accumulate gradients", severity="high",
            evidence=[f"reserved {gib(used)} of {gib(m.device_memory_capacity_bytes)} ({pct(share)})"],
            fix=checkpoint_change(),
            caveats=["checkpointing recomputes the blocks' forward: HFU rises, MFU falls unless a larger micro-batch pays it back"],
            reference="https://pytorch.org/docs/stable/checkpoint.html",
        )
        if (measured := held_at_peak(m.memory_categories, "activation")) is not None:
            finding.evidence.append(measured)
        b = m.memory_breakdown
        if b is not None and b.activations_and_temporaries is not None:
            finding.estimate_bound = (f"device memory {gib(m.device_memory_capacity_bytes)}: checkpointing frees at most the "
                                      f"activations and temporaries, {gib(b.activations_and_temporaries)} of the {gib(m.peak_memory_bytes or used)} "
                                      "peak (weights, gradients and optimizer state stay), for one more forward of the checkpointed blocks")
        else:
            finding.estimate_bound = (f"device memory {gib(m.device_memory_capacity_bytes)}: checkpointing frees only activation memory "
                                      "(the run has no memory breakdown to say how much)")
        return [self.measured(ctx, finding, "activation_checkpointing")]

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules._text import gib, pct
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class MemoryHeadroom(Rule):
    """Most of the device memory is unused: a larger micro-batch would fill the GPU better.

    Anti-pattern: a micro-batch sized for a smaller GPU leaves memory and often throughput on the table.
    Best practice: raise the micro-batch (perfscope's search measures the curve) and keep the global batch
    with gradient accumulation, or retune the learning rate when the global batch changes.
    """

    id = "PS501"
    name = "memory-headroom"
    groups = ("memory",)
    knobs = ("micro_batch",)
    addresses = ("step",)
    threshold: float = 0.5
    """Fire when peak memory is below this share of device capacity."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        m = ctx.metrics
        if not ctx.cuda or not m.peak_memory_bytes or not m.device_memory_capacity_bytes:
            return []
        share = m.peak_memory_bytes / m.device_memory_capacity_bytes
        if share >= self.threshold:
            return []
        finding = Finding(
            rule_id=self.id, title="Memory headroom: raise the micro-batch", severity="low",
            evidence=[f"peak {gib(m.peak_memory_bytes)} of {gib(m.device_memory_capacity_bytes)} ({pct(share)}) at micro-batch {m.micro_batch_size}"],
            fix="-loader = DataLoader(ds, batch_size=B)\n+loader = DataLoader(ds, batch_size=2 * B)   # and halve the accumulation steps",
            reference="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        )
        return [self.measured(ctx, finding, "micro_batch")]

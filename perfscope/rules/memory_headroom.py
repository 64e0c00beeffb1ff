from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._text import gib, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc


class MemoryHeadroom(Rule):
    """Most of the device memory is unused: a larger micro-batch would fill the GPU better.

    Anti-pattern: a micro-batch sized for a smaller GPU leaves memory and often throughput on the table.
    Best practice: raise the micro-batch (perfscope's search measures the curve) and keep the global batch
    with gradient accumulation, or retune the learning rate when the global batch changes.
    """

    id = "PS501"
    name = "memory-headroom"
    doc = RuleDoc(
        detects="most device memory unused",
        threshold="peak < 50 % of capacity",
        evidence="peak, capacity, memory breakdown",
        fix="larger micro-batch",
        gain="measured (`micro_batch`; changes the global batch); limit: the micro-batch that fills 90 % of device memory "
             "(activations scale with it, weights/gradients/optimizer state do not)",
        guard="GPU only",
    )
    groups = ("memory",)
    knobs = ("micro_batch",)
    addresses = ("step",)
    gap_parts = ("idle",)  # a larger micro-batch fills the device's idle gaps between small kernels
    threshold: float = 0.5
    """Fire when peak memory is below this share of device capacity."""
    usable: float = 0.9
    """Share of device memory a larger micro-batch may fill (the rest: allocator slack, fragmentation, spikes)."""

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
        b = m.memory_breakdown
        fits = fitting_micro_batch(m.peak_memory_bytes, b.parameters + b.gradients + b.optimizer_state, m.micro_batch_size,
                                   m.device_memory_capacity_bytes, self.usable) if b is not None else None
        if fits is not None:
            finding.evidence.append(f"about {fits} samples per micro-batch would fit in {pct(self.usable)} of the device memory "
                                    "(activations scale with the micro-batch; weights, gradients and optimizer state do not)")
            finding.estimate_bound = (f"device memory {gib(m.device_memory_capacity_bytes)}: a micro-batch of about {fits} "
                                      f"(now {m.micro_batch_size}); the throughput gain is not estimated — the micro-batch search measures it")
        return [self.measured(ctx, finding, "micro_batch")]


def fitting_micro_batch(peak: int | None, fixed: int, micro_batch: int, capacity: int | None, usable: float,
                        kept: int | None = None) -> int | None:
    """The micro-batch that fills ``usable`` of ``capacity``: the ``fixed`` bytes that do not grow with the batch
    (weights, gradients, optimizer state; ``kept`` of them after a change such as sharding) stay, the rest of the
    ``peak`` grows linearly. None when the peak holds nothing beyond them."""
    if not peak or not capacity or micro_batch < 1 or peak <= fixed:
        return None
    per_sample = (peak - fixed) / micro_batch
    return max(int((usable * capacity - (fixed if kept is None else kept)) / per_sample), micro_batch)

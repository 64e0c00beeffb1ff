from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._text import gib
from perfscope.rules.engine import Rule, RuleContext, RuleDoc


class AllocatorFragmentation(Rule):
    """The caching allocator reserves far more than it allocates: fragmentation.

    Anti-pattern: varying tensor sizes leave reserved-but-unusable blocks; memory "runs out" while most of
    it is free. Best practice: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (set before the process
    starts), or fewer distinct allocation sizes.
    """

    id = "PS504"
    name = "allocator-fragmentation"
    doc = RuleDoc(
        detects="reserved ≫ allocated",
        threshold="reserved / allocated ≥ 1.3 and ≥ 1 GiB wasted",
        evidence="peak allocated, reserved",
        fix="`expandable_segments:True`",
        gain="measured (`expandable_segments`); limit: at most reserved − allocated returns",
        guard="GPU only; small absolute waste ignored",
    )
    groups = ("memory",)
    knobs = ("expandable_segments",)
    ratio: float = 1.3
    """Fire when reserved / allocated peaks reach this ratio ..."""
    min_waste_bytes: int = 2**30
    """... and the difference is at least this many bytes."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        m = ctx.metrics
        if not ctx.cuda or not m.peak_reserved_bytes or not m.peak_memory_bytes:
            return []
        if m.peak_reserved_bytes < self.ratio * m.peak_memory_bytes or m.peak_reserved_bytes - m.peak_memory_bytes < self.min_waste_bytes:
            return []
        knob = ctx.knob("expandable_segments")  # its code change keeps the user's other allocator options
        finding = Finding(
            rule_id=self.id, title="Allocator fragmentation: enable expandable segments", severity="low",
            evidence=[f"peak reserved {gib(m.peak_reserved_bytes)} vs peak allocated {gib(m.peak_memory_bytes)}"],
            fix=knob.code_change if knob is not None and knob.code_change else "+export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # merged with your other options",
            reference="https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf",
            estimate_bound=(f"expandable segments return at most the reserved-but-unallocated memory, "
                            f"{gib(m.peak_reserved_bytes - m.peak_memory_bytes)}; the allocated peak stays"),
        )
        return [self.measured(ctx, finding, "expandable_segments")]

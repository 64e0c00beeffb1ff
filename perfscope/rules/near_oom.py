from __future__ import annotations

from perfscope.results import Finding, TrialMetrics, msg
from perfscope.rules._memory import HOLDERS, holder_bytes, peak_agreement, peak_holder
from perfscope.rules._text import gib, held_at_peak, pct, size
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import checkpoint_change, lean_optimizer_change, sharding_change


class NearOom(Rule):
    """Memory is nearly full: one longer sequence away from an OOM.

    Anti-pattern: running at > 90% of device memory leaves the allocator retrying cudaMalloc and makes any
    input variation an OOM. Best practice: cut what holds the peak. Activations: activation checkpointing of the
    repeated blocks (trade ~33% more compute for activation memory) or gradient accumulation with a smaller
    micro-batch. Optimizer state: an 8-bit optimizer, Adafactor, or ZeRO-1 sharding. Weights and gradients: FSDP
    / ZeRO-3 sharding. Which of them holds the peak, a profiled step's memory categories say; without them,
    checkpointing (activations grow with the batch, and are the usual holder).
    """

    id = "PS502"
    name = "near-oom"
    doc = RuleDoc(
        detects="memory nearly full",
        threshold="reserved ≥ 90 %",
        evidence="peak, reserved, capacity, memory breakdown; what holds a profiled step's peak when the run was profiled "
                 "by category, and that peak against the allocator's",
        fix="by what holds the profiled peak: activations → activation checkpointing; optimizer state → 8-bit optimizer, "
            "Adafactor, ZeRO-1; parameters + gradients → FSDP / ZeRO-3; not profiled → activation checkpointing",
        gain="measured (`activation_checkpointing`); limit: the fix frees at most the part it cuts (activations and "
             "temporaries for one more forward; 3/4 of the state for 8-bit; (N−1)/N of what is sharded over N ranks)",
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
        reserved = f"reserved {gib(used)} of {gib(m.device_memory_capacity_bytes)} ({pct(share)})"
        holder = peak_holder(m.memory_categories)
        finding = self._activations(m, reserved, used) if holder in (None, "activation") else self._held(m, reserved, holder)
        agreement = peak_agreement(m, cuda=True)
        if agreement is not None and agreement.agrees is False:
            finding.caveats.append(msg("text", text=agreement.text))
        return [self.measured(ctx, finding, "activation_checkpointing") if holder in (None, "activation") else finding]

    @staticmethod
    def _activations(m: TrialMetrics, reserved: str, used: int) -> Finding:
        """Today's default too: without the categories, activations are the part that grows with the batch."""
        finding = Finding(
            rule_id=NearOom.id, title="Near OOM: checkpoint activations or accumulate gradients", severity="high",
            evidence=[reserved], fix=checkpoint_change(),
            caveats=[msg("checkpointing_recomputes")],
            reference="https://pytorch.org/docs/stable/checkpoint.html",
        )
        if (measured := held_at_peak(m.memory_categories, "activation")) is not None:
            finding.evidence.append(measured)
        b = m.memory_breakdown
        capacity = gib(m.device_memory_capacity_bytes)  # type: ignore[arg-type]
        if b is not None and b.activations_and_temporaries is not None:
            finding.estimate_bound = (f"device memory {capacity}: checkpointing frees at most the "
                                      f"activations and temporaries, {gib(b.activations_and_temporaries)} of the {gib(m.peak_memory_bytes or used)} "
                                      "peak (weights, gradients and optimizer state stay), for one more forward of the checkpointed blocks")
        else:
            finding.estimate_bound = (f"device memory {capacity}: checkpointing frees only activation memory "
                                      "(the run has no memory breakdown to say how much)")
        return finding

    @staticmethod
    def _held(m: TrialMetrics, reserved: str, holder: str) -> Finding:
        """Optimizer state or weights hold the profiled peak: the fix that frees that part, bounded by its size."""
        held = m.memory_categories
        assert held is not None
        title, fix, caveat, bound, reference = HOLDER_FIXES[holder]
        return Finding(
            rule_id=NearOom.id, title=f"Near OOM: {title}", severity="high",
            evidence=[reserved] + [line for c in HOLDERS[holder] if (line := held_at_peak(held, c))], fix=fix(),
            caveats=[caveat, msg("checkpointing_would_not_help")],
            estimate_bound=bound.format(size=size(holder_bytes(held, holder))), reference=reference,
        )


HOLDER_FIXES = {
    "optimizer_state": ("optimizer state holds the peak — 8-bit optimizer, Adafactor or ZeRO-1",
                        lambda: lean_optimizer_change() + "\n# several data-parallel ranks: shard the state instead (ZeRO-1)\n"
                        + sharding_change(1), msg("lean_optimizer_state"),
                        "the optimizer state itself, {size} at the profiled peak: 8-bit state frees at most 3/4 of it, "
                        "Adafactor nearly all, ZeRO-1 over N ranks (N−1)/N", "https://pytorch.org/docs/stable/distributed.optim.html"),
    "weights": ("weights and gradients hold the peak — shard them (FSDP / ZeRO-3)", lambda: sharding_change(3),
                msg("sharding_needs_ranks"), "parameters and gradients, {size} at the profiled peak: sharded over N ranks, each "
                "keeps 1/N of them", "https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html"),
}
"""A holder other than activations: (title, fix, caveat, the bound on what the fix frees, reference)."""

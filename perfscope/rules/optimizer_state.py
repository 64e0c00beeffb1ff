from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules._text import gib, pct
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class OptimizerState(Rule):
    """Optimizer state is a large share of memory: shard it or shrink it.

    Anti-pattern: AdamW keeps two fp32 moments per parameter (8 B/param) — for a 1B-parameter model 8 GB,
    more than the weights. Best practice: 8-bit optimizers (bitsandbytes), Adafactor (factored second
    moment), or ZeRO/FSDP sharding across data-parallel ranks.
    """

    id = "PS503"
    name = "optimizer-state"
    groups = ("memory",)
    threshold: float = 0.25
    """Fire when optimizer state is at least this share of the step's peak memory."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        b = ctx.metrics.memory_breakdown
        peak = ctx.metrics.peak_memory_bytes
        if not ctx.cuda or b is None or not peak or b.optimizer_state / peak < self.threshold:
            return []
        per_param = b.optimizer_state / max(b.parameters, 1) * 4  # bytes of state per fp32 parameter
        return [Finding(
            rule_id=self.id, title="Optimizer state dominates memory: 8-bit optimizer, Adafactor or ZeRO/FSDP", severity="low",
            evidence=[f"optimizer state {gib(b.optimizer_state)} = {pct(b.optimizer_state / peak)} of the peak "
                      f"({per_param:.0f} B per parameter; weights {gib(b.parameters)})",
                      f"an 8-bit optimizer would free about {gib(b.optimizer_state * 0.75)}; ZeRO-1 over N ranks frees (N−1)/N of it"],
            fix="-optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n+optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)   # or FSDP / ZeroRedundancyOptimizer",
            caveats=["numerics: quantized or factored optimizer state changes the update slightly"],
            estimate_bound=(f"the optimizer state itself, {gib(b.optimizer_state)}: 8-bit state frees at most 3/4 of it, "
                            "sharding over N ranks (N−1)/N; activations and weights stay"),
            reference="https://pytorch.org/docs/stable/distributed.optim.html",
        )]

from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class SyncPoints(Rule):
    """Host-device synchronization inside the step (`.item()`, `print(loss)`, `torch.cuda.synchronize()`).

    Anti-pattern: reading a GPU value on the host every step stalls the CPU until the GPU drains its queue,
    so the next step's launches cannot run ahead (one workload went 151 → 128 ms/step by removing them).
    Best practice: keep metrics on the device and read them every N steps, or asynchronously.
    """

    id = "PS302"
    name = "sync-points"
    groups = ("host",)
    min_syncs: float = 1.0
    """Fire at this many synchronizing calls per step."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        events = ctx.fact("sync_events_per_step", {})
        count = sum(v for k, v in events.items() if k in ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize"))
        if not ctx.cuda or count < self.min_syncs:
            return []
        share = ctx.fact("sync_fraction", 0.0)
        return [Finding(
            rule_id=self.id, title="Synchronizing calls inside the step", severity="medium" if share >= 0.05 else "low",
            evidence=[f"{count:.0f} synchronizing calls per step ({', '.join(f'{k}×{v:.0f}' for k, v in events.items())})",
                      f"{share:.1%} of the step is spent blocked in them"],
            fix="-    print(loss.item())\n+    if step % 100 == 0:\n+        print(loss.item())   # read device values rarely",
            reference="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
        )]

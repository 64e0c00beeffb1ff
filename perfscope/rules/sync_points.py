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
    addresses = ("sync",)
    min_syncs: float = 1.0
    """Fire at this many sync points (merged nests of synchronizing calls) per step."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        sync = ctx.facts.sync if ctx.facts else None
        if not ctx.cuda or sync is None or sync.points_per_step < self.min_syncs:
            return []
        share = sync.blocked_fraction
        points = sync.points_per_step
        evidence = [f"{points:.0f} sync point{'' if round(points) == 1 else 's'} per step ({', '.join(f'{k}×{v:.0f}' for k, v in sync.events_per_step.items())}; "
                    "nested calls are one point)",
                    f"{share:.1%} of the step is spent blocked in them"]
        gpu = ctx.facts.gpu if ctx.facts else None
        if gpu is not None and gpu.idle.sync_s > 0:
            evidence.append(f"the GPU then idles {gpu.idle.sync_s * 1e3:.2f} ms per step with an empty queue")
        return [Finding(
            rule_id=self.id, title="Synchronizing calls inside the step", severity="medium" if share >= 0.05 else "low",
            evidence=evidence,
            fix="-    print(loss.item())\n+    if step % 100 == 0:\n+        print(loss.item())   # read device values rarely",
            reference="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
        )]

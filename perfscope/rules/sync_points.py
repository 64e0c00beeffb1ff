from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext, RuleDoc


class SyncPoints(Rule):
    """Host-device synchronization inside the step (`.item()`, `print(loss)`, `torch.cuda.synchronize()`).

    Anti-pattern: reading a GPU value on the host every step stalls the CPU until the GPU drains its queue,
    so the next step's launches cannot run ahead (one workload went 151 → 128 ms/step by removing them).
    Best practice: keep metrics on the device and read them every N steps, or asynchronously.
    """

    id = "PS302"
    name = "sync-points"
    doc = RuleDoc(
        detects="host waits on the device in the step",
        threshold="≥ 1 wait per step (a runtime call that waited: `cuda*Synchronize`, blocking memcpy) costing ≥ 1% of the "
                  "step (the GPU idle in the gaps the waits opened; without a device timeline, the time blocked)",
        evidence="waits per step by call site (ops, copy direction, the user's Python frame), blocked share, the GPU idle "
                 "they caused",
        fix="drop `.item()`/prints from the step; a blocking batch copy → pinned memory + `non_blocking=True`",
        gain="not quantified",
        guard="`aten::item` on a host tensor (foreach AdamW's step counters) is no wait; a wait that finds the GPU idle "
              "anyway costs nothing",
    )
    groups = ("host",)
    addresses = ("sync",)
    min_syncs: float = 1.0
    """Fire at this many waits (merged nests of waiting runtime calls) per step ..."""
    min_cost: float = 0.01
    """... when they cost at least this share of the step: the GPU idle in the gaps they opened (the queue drained
    while the host waited), or, with no device timeline, the host time blocked in them. A wait that finds the
    GPU idle anyway costs nothing and is not worth a code change."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        sync = ctx.facts.sync if ctx.facts else None
        if not ctx.cuda or sync is None or sync.points_per_step < self.min_syncs:
            return []
        step = ctx.facts.step_time_s if ctx.facts else 0.0
        idle = sync.gpu_idle_after_s
        cost = idle / step if idle is not None and step > 0 else sync.blocked_fraction
        if cost < self.min_cost:
            return []
        points = sync.points_per_step
        where = sync.sites or sync.events_per_step
        evidence = [f"{points:.0f} wait{'' if round(points) == 1 else 's'} on the device per step: "
                    + ", ".join(f"{site} ×{n:.0f}" if n >= 1 else f"{site} ×{n:.1f}" for site, n in list(where.items())[:4]),
                    f"{sync.blocked_fraction:.1%} of the step is spent blocked in them"]
        if idle is not None:
            evidence.append(f"the GPU then idles {idle * 1e3:.2f} ms per step ({cost:.1%} of the step): the wait drained "
                            "its queue, so the host work after it ran with the GPU idle")
            gpu = ctx.facts.gpu if ctx.facts else None
            if gpu is not None:  # the same gaps as the step breakdown, split as it splits them
                gap = gpu.idle
                evidence.append(f"in the step breakdown's terms (one gap accounting): sync {gap.sync_s * 1e3:.2f} ms, data wait "
                                f"{gap.data_wait_s * 1e3:.2f} ms, host launches {gap.host_s * 1e3:.2f} ms, other "
                                f"{gap.other_s * 1e3:.2f} ms of GPU idle per step")
        top = next(iter(where), "")
        if "HtoD copy" in top:
            fix = ("-    x = x.to(device)\n+    x = x.to(device, non_blocking=True)   # from pinned memory: "
                   "DataLoader(..., pin_memory=True)")
        else:
            fix = "-    print(loss.item())\n+    if step % 100 == 0:\n+        print(loss.item())   # read device values rarely"
        return [Finding(
            rule_id=self.id, title="Synchronizing calls inside the step", severity="medium" if cost >= 0.05 else "low",
            evidence=evidence, fix=fix,
            reference="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
        )]

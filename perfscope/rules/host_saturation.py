from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext, RuleDoc


class HostCpuSaturation(Rule):
    """The host CPU is saturated during training.

    Anti-pattern: data workers, tokenization and the training process compete for too few cores, so the
    launch thread and the loader starve each other. Best practice: size num_workers to the free cores, pin
    the training process and its workers to the GPU's NUMA node, move preprocessing offline.
    """

    id = "PS701"
    name = "host-cpu-saturation"
    doc = RuleDoc(
        detects="host CPU saturated",
        threshold="median ≥ 90 % on a GPU run",
        evidence="host CPU utilization",
        fix="bound the DataLoader workers per GPU",
        gain="not quantified",
        guard="silent on CPU runs (the CPU is the device)",
    )
    groups = ("host",)
    addresses = ("data_wait", "launch")
    threshold: float = 90.0
    """Fire when median host CPU utilization (all cores, %) reaches this."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        util = ctx.metrics.utilization
        # On a CPU-only run the CPU is the device: busy cores are the point, not a bottleneck.
        if not ctx.cuda or util is None or util.cpu_percent is None or util.cpu_percent.median < self.threshold:
            return []
        cores = ctx.results.environment.cpu_cores_logical
        return [Finding(
            rule_id=self.id, title="Host CPU saturated", severity="medium",
            evidence=[f"median host CPU utilization {util.cpu_percent.median:.0f}% across {cores} logical cores"],
            fix="-loader = DataLoader(ds, num_workers=os.cpu_count())\n+loader = DataLoader(ds, num_workers=min(8, os.cpu_count() // gpus_per_node - 1))",
            reference="https://pytorch.org/tutorials/intermediate/torchserve_with_ipex.html#cpu-threading-and-numa",
        )]

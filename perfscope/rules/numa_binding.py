from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._distributed import distributed_facts
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.versions import at_least

TORCHRUN_BINDING = (2, 9)
"""torchrun --numa-binding appeared in PyTorch 2.9."""


class NumaBinding(Rule):
    """The machine has several NUMA nodes and the ranks are not bound to theirs.

    Anti-pattern: ranks left to the scheduler on a multi-socket machine: a rank's threads, its DataLoader
    workers and its pinned host memory land on the far socket from its GPU, and every host-to-device copy and
    every launch crosses the interconnect. Best practice: each rank on the CPUs and memory of its GPU's NUMA
    node — `torchrun --numa-binding node` (PyTorch ≥ 2.9), or `numactl --cpunodebind=N --membind=N` per rank.
    """

    id = "PS804"
    name = "numa-binding"
    doc = RuleDoc(
        detects="ranks not bound to their NUMA node",
        threshold="the machine has > 1 NUMA node and the run set no binding",
        evidence="`DistributedFacts.numa_nodes`, `numa_binding`, the torch version",
        fix="`torchrun --numa-binding node` (PyTorch ≥ 2.9, GPUs); else `numactl --cpunodebind/--membind` per rank through "
            "`torchrun --no-python`",
        gain="measured (`numa_binding`); else not quantified",
        guard="silent on one NUMA node and when the run was bound",
    )
    groups = ("distributed", "host")
    knobs = ("numa_binding",)
    addresses = ("host", "data_wait")

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = distributed_facts(ctx)
        if facts is None:
            return []
        nodes = facts.numa_nodes or getattr(ctx.results.environment, "numa_nodes", None)
        if not nodes or nodes < 2 or facts.numa_binding is not None or ctx.config("numa_binding") is not None:
            return []
        version = ctx.results.environment.torch_version
        new = at_least(version, TORCHRUN_BINDING)
        evidence = [f"this machine has {nodes} NUMA nodes and the {facts.nproc_per_node} rank(s) per node ran unbound: a rank's "
                    "threads, workers and host memory may sit on another node than its device"]
        if ctx.cuda and new:
            fix = (f"-torchrun --nproc-per-node {facts.nproc_per_node} train.py\n"
                   f"+torchrun --nproc-per-node {facts.nproc_per_node} --numa-binding node train.py   # each rank on its GPU's node")
        else:
            why = ("" if not ctx.cuda else f"   # torch {version} has no torchrun --numa-binding (PyTorch ≥ 2.9)")
            n = facts.nproc_per_node
            fix = ("# bind.sh: each rank on one NUMA node, round robin over the machine's nodes" + why + "\n"
                   f"+exec numactl --cpunodebind=$((LOCAL_RANK % {nodes})) --membind=$((LOCAL_RANK % {nodes})) python train.py \"$@\"\n"
                   f"-torchrun --nproc-per-node {n} train.py\n"
                   f"+torchrun --nproc-per-node {n} --no-python ./bind.sh")
            if not ctx.cuda:
                evidence.append("a CPU run: bind each rank's threads and memory to one node (torchrun --numa-binding follows GPUs)")
        finding = Finding(rule_id=self.id, title="Ranks are not bound to their NUMA node", severity="low", evidence=evidence,
                          fix=fix, reference="https://pytorch.org/docs/stable/elastic/run.html")
        return [self.measured(ctx, finding, "numa_binding")]

"""torchrun `--numa-binding=node` (PyTorch ≥ 2.9): each rank runs on the CPUs of its GPU's NUMA node.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import Knob, KnobContext
from perfscope.versions import major_minor
from perfscope.wording import reason

MIN_TORCH = (2, 9)


class NumaBinding(Knob):
    id = "numa_binding"
    title = "torchrun --numa-binding=node (each rank on its GPU's NUMA node)"
    reference = "https://pytorch.org/docs/stable/elastic/run.html"
    fields = ("numa_binding",)
    value = "node"
    addresses = ("host", "data_wait")

    def code_change(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return None  # torchrun binds each rank to its GPU's node: nothing to bind a CPU run to
        return ("-torchrun --nproc-per-node=N train.py\n"
                "+torchrun --nproc-per-node=N --numa-binding=node train.py   # PyTorch ≥ 2.9")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.numa_binding is not None:
            return f"the ranks are already bound (--numa-binding={ctx.base.numa_binding})"
        if ctx.base.world_size < 2:
            return "one process: --numa-binding is a torchrun option for the ranks of a distributed run"
        if not ctx.cuda:
            return "torchrun binds each rank to the NUMA node of its GPU; this run has no GPU"
        version = major_minor(ctx.environment.torch_version)
        if version is None or version < MIN_TORCH:
            return f"torchrun --numa-binding needs PyTorch ≥ 2.9 (this run: {ctx.environment.torch_version or 'unknown'})"
        nodes = ctx.environment.numa_nodes
        if nodes is None:
            why = reason(ctx.environment.unavailable, "numa_nodes", "not recorded")
            return f"the machine's NUMA node count is unknown ({why})"
        if nodes < 2:
            return "this machine has one NUMA node: every CPU is equally close to the GPUs, there is nothing to bind"
        return None

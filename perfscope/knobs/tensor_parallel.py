"""Tensor parallelism (`parallelize_module`): the ranks split each block's matmuls instead of replicating the model.

Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext, data_parallel_reason, size
from perfscope.results import Trial
from perfscope.wording import reason, words


def tp_reason(ctx: KnobContext, tp: int) -> str | None:
    """Why TP of degree ``tp`` cannot be tried on this model and launch, or None."""
    reason = data_parallel_reason(ctx)
    if reason is not None:
        return reason
    layout = ctx.model.layout
    if layout is None:
        return "the probe could not read how the model splits (ModelFacts.layout)"
    if str(tp) in layout.tp_inapplicable:
        return f"tp = {tp}: {words(layout.tp_inapplicable[str(tp)])}"
    if tp > ctx.base.nproc_per_node:
        return (f"tp = {tp} spans nodes ({ctx.base.nproc_per_node} ranks per node): its per-block all-reduces would "
                "cross the inter-node network; TP stays inside a node")
    if ctx.workload.precision == "fp16":
        return "fp16 with a GradScaler is not measured under TP here (use bf16)"
    return None


class TensorParallel(Knob):
    id = "tensor_parallel"
    fields = ("tensor_parallel",)
    title = "tensor parallelism (parallelize_module: q/k/v and MLP up colwise, out and down rowwise)"
    reference = "https://pytorch.org/docs/stable/distributed.tensor.parallel.html"
    cost = "an activation all-reduce per block in forward and in backward"
    traced = True  # the all-reduces it adds are read from the trace (perfscope.trace.communication)

    def code_change(self, ctx: KnobContext) -> str | None:
        world = ctx.base.world_size
        mb = ctx.base.micro_batch_size
        return "\n".join([
            "+from torch.distributed.device_mesh import init_device_mesh",
            "+from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module",
            f"+mesh = init_device_mesh(\"{ctx.device}\", ({world},), mesh_dim_names=(\"tp\",))",
            "+for block in model.blocks:   # q/k/v separate Linears; attention code uses view(b, t, -1, head_dim)",
            "+    parallelize_module(block, mesh, {\"q\": ColwiseParallel(), \"k\": ColwiseParallel(), \"v\": ColwiseParallel(),",
            "+                                     \"proj\": RowwiseParallel(), \"mlp.0\": ColwiseParallel(), \"mlp.2\": RowwiseParallel()})",
            "-model = DistributedDataParallel(model)",
            f"-loader = DataLoader(dataset, batch_size={mb}, sampler=DistributedSampler(dataset))",
            f"+loader = DataLoader(dataset, batch_size={mb * world})   # every rank of the TP group: the same samples",
        ])

    def applies(self, ctx: KnobContext) -> str | None:
        return tp_reason(ctx, ctx.base.world_size)

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        world, mb = ctx.base.world_size, ctx.base.micro_batch_size
        out: list[dict[str, Any]] = [{"data_parallel": "none", "tensor_parallel": world, "no_sync": False,
                                      "micro_batch_size": mb * world}]
        half = world // 2
        if world >= 4 and world % 2 == 0 and tp_reason(ctx, half) is None:  # 2-D: FSDP2 across replicas × TP
            out.append({"data_parallel": "fsdp", "tensor_parallel": half, "no_sync": False,
                        "micro_batch_size": mb * half})
        return out

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        facts = trial.metrics.distributed if trial.metrics else None
        if facts is None:
            return []
        notes = [f"the same global batch ({facts.global_batch}): every TP group computes micro-batch "
                 f"{trial.config.micro_batch_size} together"]
        ranks = [r for r in facts.ranks if r.parameter_bytes is not None]
        if ranks:
            notes.append(f"parameters per rank {size(max(r.parameter_bytes or 0 for r in ranks))} (counted from its tensors)")
        comm = facts.communication
        if comm is not None:
            notes.append(f"collectives {comm.collective_s * 1e3:.1f} ms per step, {comm.exposed_collective_s * 1e3:.1f} ms "
                         "of it exposed (from the trace)")
        else:
            notes.append(f"TP communication unavailable: {reason(facts.unavailable, 'communication', 'no trace')}")
        return notes

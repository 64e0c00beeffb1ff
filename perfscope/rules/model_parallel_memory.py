from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._distributed import distributed_facts
from perfscope.rules._text import gib, pct
from perfscope.rules.data_parallel_memory import stage_of
from perfscope.rules.engine import Rule, RuleContext, RuleDoc

TP_PP_FIX = ("+from torch.distributed.device_mesh import init_device_mesh\n"
             "+from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n"
             "+mesh = init_device_mesh(\"{device}\", (dp, tp), mesh_dim_names=(\"dp\", \"tp\"))   # tp ranks inside a node (NVLink)\n"
             "+for block in model.blocks:\n"
             "+    parallelize_module(block, mesh[\"tp\"], {{\"q\": ColwiseParallel(), \"k\": ColwiseParallel(), \"v\": ColwiseParallel(),\n"
             "+                                         \"o\": RowwiseParallel(), \"up\": ColwiseParallel(), \"down\": RowwiseParallel()}})\n"
             "+    fully_shard(block, mesh=mesh[\"dp\"])   # 2-D: FSDP2 across the replicas\n"
             "+fully_shard(model, mesh=mesh[\"dp\"])\n"
             "+# or across nodes: torch.distributed.pipelining — pipeline(model, split_spec={{\"blocks.N\": SplitPoint.BEGINNING}}),\n"
             "+#   ScheduleGPipe / Schedule1F1B with n_microbatches ≥ 4 × stages")


class ModelParallelMemory(Rule):
    """The model's state does not fit one rank even fully sharded: tensor or pipeline parallelism is the fix.

    Anti-pattern: adding data-parallel ranks to a model whose parameters, gradients and optimizer state do not fit
    one device even under ZeRO-3 / FSDP2 (1/N of everything per rank, plus one block gathered at a time) — more
    ranks shrink the shard, but the gathered block, the activations and the communication grow with the model.
    Best practice: split the model itself — tensor parallelism inside a node (each rank holds 1/tp of every block,
    composed with FSDP2 across nodes on a 2-D DeviceMesh), or pipeline parallelism across nodes (each rank holds
    1/pp of the blocks; only activations cross the link) — and size the rest with the layout search.
    """

    id = "PS805"
    name = "model-parallel-memory"
    doc = RuleDoc(
        detects="the model's state does not fit one rank even fully sharded",
        threshold="ZeRO-3's modelled state per rank ≥ 90 % of the device, or the layout search pruned every data-parallel "
                  'layout as "would not fit" while a TP/PP one fits',
        evidence="the memory model's ZeRO-3 row, the layout table's pruned and fitting rows",
        fix='tensor parallelism inside a node on a 2-D mesh with FSDP2 across nodes (`parallelize_module`, '
            '`fully_shard(mesh=mesh["dp"])`), or pipeline stages across nodes',
        gain="not quantified (the layout table measures the layouts)",
        guard="silent on a run that already splits the model",
    )
    groups = ("memory", "distributed")
    threshold: float = 0.9
    """Fire when ZeRO-3's modelled state per rank passes this share of what a rank may hold."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        facts = distributed_facts(ctx)
        if facts is None or (ctx.baseline.config is not None and ctx.baseline.config.model_parallel > 1):
            return []
        cap = ctx.metrics.device_memory_capacity_bytes or ctx.results.environment.device_memory_bytes
        zero3 = next((r for r in facts.memory_model if stage_of(r) == 3), None)
        evidence: list[str] = []
        if cap and zero3 is not None and zero3.total >= self.threshold * cap:
            evidence.append(f"ZeRO-3 (FSDP2) on {facts.world_size} ranks still leaves {gib(zero3.total)} of parameters, "
                            f"gradients and optimizer state per rank: {pct(zero3.total / cap)} of the device's {gib(cap)}, "
                            "before activations and the gathered block")
        layouts = ctx.results.layouts
        if layouts is not None:
            pure = [r for r in layouts.rows if r.tensor_parallel == 1 and r.pipeline_parallel == 1 and not r.activation_checkpointing]
            split = [r for r in layouts.rows if (r.tensor_parallel > 1 or r.pipeline_parallel > 1)
                     and r.prune_reason != "would not fit" and r.prune_reason != "inapplicable"]
            if pure and all(r.prune_reason == "would not fit" or r.status == "failed" for r in pure) and split:
                evidence.append("the layout search: every data-parallel layout would not fit ("
                                + "; ".join(f"{r.layout}: {r.reason}" for r in pure[:2]) + "); fitting: "
                                + ", ".join(f"{r.layout} ({gib(r.memory_per_rank_bytes or 0)} per rank)" for r in split[:4]))
        if not evidence:
            return []
        return [Finding(rule_id=self.id, title="The model does not fit one rank even with ZeRO-3: split it with tensor or "
                        "pipeline parallelism", severity="high", evidence=evidence, fix=TP_PP_FIX.format(device=ctx.device),
                        reference="https://pytorch.org/docs/stable/distributed.tensor.parallel.html")]

from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._distributed import model_parallel_runs
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc

FIX = ("-mesh = init_device_mesh(device, (world,), mesh_dim_names=(\"tp\",))      # TP across a slow link\n"
       "+mesh = init_device_mesh(device, (world // tp, tp), mesh_dim_names=(\"dp\", \"tp\"))   # tp = GPUs of one NVLink domain\n"
       "+for block in model.blocks:\n"
       "+    parallelize_module(block, mesh[\"tp\"], plan)\n"
       "+    fully_shard(block, mesh=mesh[\"dp\"])   # across the slow link: FSDP2 (prefetched, overlapped) instead of TP\n"
       "+# or fewer TP ranks, or pipeline stages across the slow link (one activation per micro-batch crosses it)")


class TensorParallelCommunication(Rule):
    """Tensor parallelism's all-reduces are exposed: the step waits for them on a slow interconnect.

    Anti-pattern: TP across a link much slower than NVLink (PCIe, Ethernet, another node, gloo on a CPU): each
    block all-reduces its activations once in forward and once in backward, on the critical path — compute cannot
    start the next layer without them, so nothing hides them. Best practice: keep TP inside the fastest domain
    (the GPUs of one NVLink island), use FSDP2 across the slower link on a 2-D mesh (its all-gathers are prefetched
    and overlap compute), or use fewer TP ranks or pipeline stages there (one activation per micro-batch).
    """

    id = "PS806"
    name = "tensor-parallel-communication"
    doc = RuleDoc(
        detects="TP's all-reduces are exposed on a slow link",
        threshold="a TP run (baseline, the `tensor_parallel` knob's, or a layout run) whose exposed collective time ≥ 10 % "
                  "of its traced step",
        evidence="that run's `DistributedFacts.communication` (its trace): exposed / total collective time, per op calls "
                 "and bus bandwidth, the backend and node count",
        fix="TP inside one NVLink domain, FSDP2 across the slower link on a 2-D mesh, fewer TP ranks or pipeline stages "
            "there",
        gain="not quantified",
        guard="reads only TP runs (DDP's exposed time is PS801's)",
    )
    groups = ("distributed",)
    addresses = ("communication",)
    threshold: float = 0.10
    """Fire when the TP run's exposed collective time is at least this share of its step."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        for trial in model_parallel_runs(ctx, tp=True):
            facts = trial.metrics.distributed if trial.metrics else None
            comm = facts.communication if facts else None
            if facts is None or comm is None or comm.step_s <= 0:
                continue
            share = comm.exposed_collective_s / comm.step_s
            if share < self.threshold:
                continue
            link = ("gloo on the host (no GPU interconnect)" if facts.backend == "gloo"
                    else f"{facts.nnodes} nodes" if facts.nnodes > 1 else f"{facts.backend} within one node")
            evidence = [f"{trial.configuration} (tp = {trial.config.tensor_parallel}): {ms(comm.exposed_collective_s)} of "
                        f"collectives exposed per {ms(comm.step_s)} step ({pct(share)}), {ms(comm.collective_s)} in all, "
                        f"over {link}"]
            for stat in comm.collectives[:3]:
                bw = f", {stat.bus_gbps:.1f} GB/s bus bandwidth" if stat.bus_gbps is not None else ""
                evidence.append(f"{stat.op}: {stat.calls_per_step:g} calls per step, {ms(stat.time_s_per_step)}{bw}")
            evidence.append("TP's all-reduces sit between a block's matmuls: no compute overlaps them")
            return [Finding(rule_id=self.id, title=f"Tensor parallelism waits {pct(share)} of its step on exposed all-reduces",
                            severity="high" if share >= 0.3 else "medium", evidence=evidence, fix=FIX,
                            reference="https://pytorch.org/docs/stable/distributed.tensor.parallel.html")]
        return []

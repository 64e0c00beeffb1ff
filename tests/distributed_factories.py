"""Builders of data-parallel Results for the rules and the report: a baseline whose `metrics.distributed` is filled.

    results = make_distributed_results(straggler=2, cause="gc", exposed_share=0.3)
"""

from __future__ import annotations

import dataclasses

from perfscope.results import (
    CollectiveStat,
    CommunicationFacts,
    DistributedFacts,
    RankMetrics,
    Results,
    ShardingMemory,
    Straggler,
)
from tests.factories import make_results, make_step_times, make_trial

GiB = 2**30


def make_rank(rank: int, *, nproc: int, step_s: float = 0.1, local_step_s: float = 0.07, steps: int = 30, batch: int = 8,
              data_wait_share: float = 0.0, peak_bytes: int = 10 * GiB, collective_s: float = 0.04, exposed_s: float = 0.01) -> RankMetrics:
    times = make_step_times(step_s, steps, seed=rank)
    wall = sum(times)
    return RankMetrics(
        rank=rank, local_rank=rank % nproc, node=f"node-{rank // nproc}", steps=steps, samples=steps * batch, wall_s=wall,
        samples_per_s=steps * batch / wall, step_times_s=times, data_wait_share=data_wait_share,
        local_step_times_s=make_step_times(local_step_s, 10, seed=100 + rank), gc_collections=2, gc_pause_s=0.001,
        other_cpu_cores=0.1, peak_memory_bytes=peak_bytes, collective_s_per_step=collective_s, exposed_collective_s_per_step=exposed_s,
    )


def sharding_rows(parameters: int, gradients: int, optimizer_state: int, world: int) -> list[ShardingMemory]:
    """The memory model of DDP and ZeRO-1/2/3 for a state of these sizes on ``world`` ranks."""
    n = world
    return [
        ShardingMemory(strategy="DDP", parameters=parameters, gradients=gradients, optimizer_state=optimizer_state,
                       measured_total=parameters + gradients + optimizer_state, measured_by="baseline"),
        ShardingMemory(strategy="ZeRO-1 (ZeroRedundancyOptimizer)", parameters=parameters, gradients=gradients, optimizer_state=optimizer_state // n),
        ShardingMemory(strategy="ZeRO-2 (FSDP2, no reshard)", parameters=parameters, gradients=gradients // n, optimizer_state=optimizer_state // n),
        ShardingMemory(strategy="ZeRO-3 (FSDP2)", parameters=parameters // n, gradients=gradients // n, optimizer_state=optimizer_state // n),
    ]


def make_distributed_facts(world: int = 4, *, nnodes: int = 1, step_s: float = 0.1, exposed_share: float = 0.3,
                           straggler: int | None = None, cause: str = "gc", slower_by: float = 0.3, slowest_share: float = 0.95,
                           numa_nodes: int | None = 2, numa_binding: str | None = None, data_parallel: str = "ddp",
                           peak_bytes: int = 10 * GiB, state_bytes: tuple[int, int, int] = (GiB, GiB, 2 * GiB),
                           bus_gbps: float = 12.0, microbench_gbps: float = 40.0) -> DistributedFacts:
    nproc = world // nnodes
    local = step_s * (1 - exposed_share) * 0.9
    collective, exposed = step_s * exposed_share * 1.5, step_s * exposed_share
    ranks = [make_rank(r, nproc=nproc, step_s=step_s, local_step_s=local * (1 + slower_by if r == straggler else 1.0),
                       peak_bytes=peak_bytes, collective_s=collective, exposed_s=exposed) for r in range(world)]
    stragglers = []
    if straggler is not None:
        stragglers.append(Straggler(rank=straggler, slower_by=slower_by, slowest_share=slowest_share, cause=cause,  # type: ignore[arg-type]
                                    evidence=[f"{cause}: measured on rank {straggler}"]))
    comm = CommunicationFacts(
        rank=0, step_s=step_s, compute_s=step_s - exposed, collective_s=collective, exposed_collective_s=exposed,
        overlap_share=1 - exposed / collective if collective else None, source="trace/rank0.json.gz",
        collectives=[CollectiveStat(op="all_reduce", calls_per_step=12, time_s_per_step=collective * 0.9, bytes_per_step=400 * 2**20,
                                    bus_gbps=bus_gbps, microbench_bus_gbps=microbench_gbps, microbench_bytes=25 * 2**20),
                     CollectiveStat(op="broadcast", calls_per_step=1, time_s_per_step=collective * 0.1, bytes_per_step=2**20)],
    )
    return DistributedFacts(
        world_size=world, nnodes=nnodes, nproc_per_node=nproc, backend="nccl", data_parallel=data_parallel, global_batch=8 * world,
        job_samples_per_s=sum(r.samples or 0 for r in ranks) / max(r.wall_s for r in ranks),
        slowest_rank=straggler if straggler is not None else 0, ranks=ranks, stragglers=stragglers,
        straggler_method="compute step without communication vs the others' median, beyond 3 σ of its own steps",
        communication=comm, memory_model=sharding_rows(*state_bytes, world), numa_nodes=numa_nodes, numa_binding=numa_binding,
    )


def make_distributed_results(device: str = "cuda", **facts_kw) -> Results:
    """A data-parallel baseline (every rule's quiet default: no problem unless ``facts_kw`` adds one)."""
    facts = make_distributed_facts(**{"exposed_share": 0.02, "numa_nodes": 1, **facts_kw})
    trial = make_trial(median_s=0.1)
    trial.config = dataclasses.replace(trial.config, device=device, nproc_per_node=facts.nproc_per_node, nnodes=facts.nnodes,
                                       data_parallel=facts.data_parallel, precision="bf16", tf32=True)  # type: ignore[arg-type]
    trial.metrics.distributed = facts
    trial.metrics.trace_facts = None
    results = make_results([trial], device_type=device)
    return results


def make_pipeline_results(*, microbatches: int = 2, stages: int = 2, bubble: float | None = 0.4, schedule: str = "gpipe") -> Results:
    """A baseline whose loop is a pipeline (tests of PS807): its parallel facts, measured bubble and formula."""
    from perfscope.results import ParallelFacts
    from perfscope.results.layout import bubble_formula

    results = make_distributed_results(world=stages)
    trial = results.trials[0]
    trial.config = dataclasses.replace(trial.config, data_parallel="none", pipeline_parallel=stages, grad_accum_steps=microbatches,
                                       pipeline_schedule=schedule)  # type: ignore[arg-type]
    facts = trial.metrics.distributed
    facts.data_parallel = "none"
    facts.parallel = ParallelFacts(pipeline_parallel=stages, schedule=schedule, microbatches=microbatches,
                                   bubble_measured=bubble, bubble_formula=bubble_formula(stages, microbatches),
                                   bubble_replayed=bubble_formula(stages, microbatches))
    return results


def make_tensor_parallel_results(*, exposed_share: float = 0.3, tp: int = 2) -> Results:
    """A baseline whose loop is tensor parallel (tests of PS806): gloo, its trace's exposed collectives."""
    from perfscope.results import ParallelFacts

    results = make_distributed_results(world=tp, exposed_share=exposed_share)
    trial = results.trials[0]
    trial.config = dataclasses.replace(trial.config, data_parallel="none", tensor_parallel=tp)  # type: ignore[arg-type]
    facts = trial.metrics.distributed
    facts.data_parallel, facts.backend = "none", "gloo"
    facts.parallel = ParallelFacts(tensor_parallel=tp, tp_plan={"blocks.0.q": "colwise", "blocks.0.o": "rowwise"})
    return results

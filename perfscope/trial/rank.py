"""One rank of a distributed trial (runs in each process torchrun starts; see perfscope.trial.launch).

Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist

from perfscope.measure import memory
from perfscope.measure.clock import synchronize
from perfscope.measure.contention import JOB_ROOT_ENV
from perfscope.measure.cores import numa_node_count
from perfscope.measure.memory import sharding_memory, strategy_of
from perfscope.measure.peaks import benchmark_collective
from perfscope.measure.ranks import combine_ranks
from perfscope.measure.ranks import rank_metrics as measured_rank
from perfscope.results import CommunicationFacts, RankMetrics, from_jsonable, to_jsonable, write_json
from perfscope.results.config import TrialConfig
from perfscope.results.messages import error, msg
from perfscope.trace.communication import communication_facts
from perfscope.trial.data_parallel import RankInfo, can_skip_all_communication, init_process_group
from perfscope.trial.launch import Launch, rank_result_path
from perfscope.trial.loop import MeasuredRun, capture_trace, nonfinite_loss, run_trial
from perfscope.trial.model_parallel import parallel_facts, rank_stage_timing
from perfscope.trial.spec import ChildSpec, FollowSpec, ProbeSpec, SpecError, StopSpec, TrialSpec, spec_from_dict, spec_to_dict
from perfscope.workload import load_workload

LOCAL_WINDOW_STEPS = (10, 30)
"""Steps of the no-communication window, at least and at most: with 5% step noise, 10 steps find a 30% straggler
every time (5 steps: two times in three; tests/test_stragglers.py)."""


def run_rank(spec: ChildSpec, result_path: Path) -> dict[str, Any]:
    """This rank's outcome (also written to its own file); rank 0 also writes the job's ``result_path``."""
    os.environ[JOB_ROOT_ENV] = str(os.getppid())  # the torchrun agent: the job's other ranks are not neighbours
    if isinstance(spec, ProbeSpec) or spec.launch is None:
        raise SpecError(f"a {spec.mode} spec without a launch is not a rank of a torchrun job")
    launch = spec.launch
    info = init_process_group(spec.device, timeout_s=launch.collective_timeout_s)
    spec = agree_on_spec(spec, info)
    if isinstance(spec, StopSpec):  # the leader's analysis is over: the other nodes' workers go home
        if info.rank == 0:
            write_json(result_path, {"status": "stop", "error": None})
        dist.destroy_process_group()
        return {"status": "stop", "error": None}
    if not isinstance(spec, TrialSpec):
        raise SpecError(f"rank 0 sent a {spec.mode} spec: only a trial or a stop is run by every rank")
    config = spec.config
    own_path = rank_result_path(result_path, info.rank)
    workload = load_workload(spec.workload_path)
    run = run_trial(workload, config)
    metrics = run.metrics
    if (nonfinite := nonfinite_loss(metrics.losses)) is not None:
        return {"status": "nonfinite", "error": f"{nonfinite} on rank {info.rank}", "metrics": to_jsonable(metrics)}
    write_json(own_path, {"status": "ok", "error": None, "phase": "timed"})
    ranked = rank_metrics(run, info, config)
    if config.capture_trace and spec.artifacts_dir:
        capture_trace(run, config, Path(spec.artifacts_dir))
    communication = communication_of(run, info, config, ranked)
    stage = rank_stage_timing(run, info.rank, config)
    gathered: list[Any] = [None] * info.world_size if info.rank == 0 else []
    dist.gather_object((to_jsonable(ranked), to_jsonable(communication) if communication else None, stage),
                       gathered if info.rank == 0 else None, dst=0)
    if info.rank == 0:
        job = job_result(metrics, config, info, gathered, launch)
        if config.model_parallel > 1:
            job.distributed.parallel = parallel_facts(config, workload, [g[2] for g in gathered])
        write_json(result_path, {"status": "ok", "error": None, "metrics": to_jsonable(job)})
    # The model (a DDP model holds the process group) must die before the group does, while the interpreter
    # lives: torch's lazy dynamo import on the first optimizer keeps this frame alive, and a gloo thread that frees
    # a finished allreduce during interpreter shutdown aborts the rank after its result is written.
    del run
    gc.collect()
    dist.barrier()  # no rank leaves (and tears the group down) while rank 0 still writes
    dist.destroy_process_group()
    return {"status": "ok", "error": None}


def agree_on_spec(spec: ChildSpec, info: RankInfo) -> ChildSpec:
    """Rank 0's spec, on every rank: on another node (perfscope worker) a rank knows only how to join the job, and
    learns what to run from rank 0 — with its own node's paths for the workload file, the artifacts and its result.
    On one node every rank already has it; the broadcast costs a millisecond and keeps one code path for both. The
    spec crosses as its checked dict (perfscope.trial.spec), as it does between any two processes."""
    box: list[Any] = [spec_to_dict(spec) if info.rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    leader = spec_from_dict(box[0])
    if info.rank == 0 or not isinstance(spec, FollowSpec):
        return leader
    if isinstance(leader, TrialSpec):
        artifacts = str(Path(spec.work_dir) / Path(leader.artifacts_dir).name) if leader.artifacts_dir else None
        return dataclasses.replace(leader, workload_path=spec.workload_path, artifacts_dir=artifacts,
                                   result_path=spec.result_path)
    return dataclasses.replace(leader, result_path=spec.result_path)


def rank_metrics(run: MeasuredRun, info: RankInfo, config: TrialConfig) -> RankMetrics:
    """This rank's own view of its window (perfscope.measure.ranks, as the hooks summarise a rank), and its compute
    alone: a window without gradient communication, where the strategy can run one."""
    m = run.metrics
    ranked = measured_rank(m, rank=info.rank, local_rank=info.local_rank, node=info.node, gc_pauses=run.gc_pauses)
    if can_skip_all_communication(config):
        ranked.local_step_times_s = local_compute_window(run, min(max(m.steps, LOCAL_WINDOW_STEPS[0]), LOCAL_WINDOW_STEPS[1]))
    else:
        why = (msg("model_parallel_exchanges") if config.model_parallel > 1
               else msg("forward_gathers_parameters", strategy=config.data_parallel))
        ranked.unavailable["local_step_times_s"] = msg("no_step_without_communication", why=why)
    return ranked


def local_compute_window(run: MeasuredRun, steps: int) -> list[float]:
    """Step times of forward + backward with the gradient sync off and no optimizer step (it changes nothing: the
    gradients are dropped), each step synchronized: this rank's compute alone, for the straggler analysis."""
    step = run.step
    times = []
    dist.barrier()  # start together, so a slow rank's window does not overlap a fast one's tail
    for _ in range(steps):
        synchronize(step.device)
        start = time.perf_counter()
        step.accumulate(None, sync=False)
        step.optimizer.zero_grad(set_to_none=True)
        synchronize(step.device)
        times.append(time.perf_counter() - start)
    dist.barrier()
    return times


def communication_of(run: MeasuredRun, info: RankInfo, config: TrialConfig, ranked: RankMetrics) -> Any:
    """This rank's communication facts from its trace (None without a trace), with the micro-benchmarked bus
    bandwidth of each collective it ran; the per-step figures also go to ``ranked``. Every rank runs the same
    micro-benchmarks in the same order (they are collectives)."""
    metrics = run.metrics
    payload = payload_bytes(run, config, info.world_size)
    bench: dict[str, tuple[int, float | None]] = {}
    for op, nbytes in sorted(payload.items()):
        size = max(min(nbytes, microbench_bytes(config)), 4)
        try:
            bench[op] = (size, benchmark_collective(op, size, device=config.device))
        except Exception as exc:  # noqa: BLE001 - the benchmark is context, not the measurement
            bench[op] = (size, None)
            ranked.unavailable[f"microbench.{op}"] = msg("exception", error=error(exc))
    if not metrics.trace_path:
        ranked.unavailable["collective_s_per_step"] = metrics.unavailable.get("trace", msg("no_trace_captured"))
        return None
    try:
        facts = communication_facts(Path(metrics.trace_path), rank=info.rank, device_type=config.device,
                                    steps=3, world_size=info.world_size, payload_bytes=payload)
    except Exception as exc:  # noqa: BLE001
        ranked.unavailable["collective_s_per_step"] = msg("trace_analysis_failed", error=error(exc))
        return None
    for stat in facts.collectives:
        if stat.op in bench:
            stat.microbench_bytes, stat.microbench_bus_gbps = bench[stat.op]
    ranked.collective_s_per_step = facts.collective_s
    ranked.exposed_collective_s_per_step = facts.exposed_collective_s
    return facts


def payload_bytes(run: MeasuredRun, config: TrialConfig, world_size: int) -> dict[str, int]:
    """What the strategy moves per optimizer step, by collective: DDP all-reduces every gradient once per sync;
    FSDP2 all-gathers the parameters (again in backward when it resharded after forward) and reduce-scatters
    the gradients; ZeRO-1 adds a broadcast of the updated parameters."""
    step = run.step
    local = memory.trainable_parameter_bytes(step.model)  # this rank's shards under FSDP
    syncs = 1 if config.no_sync else config.grad_accum_steps
    if config.data_parallel in ("ddp", "zero1"):
        grad_bytes = local
        if config.comm_hook in ("bf16", "fp16"):
            grad_bytes //= 2
        out = {"all_reduce": grad_bytes * syncs}
        if config.data_parallel == "zero1":
            out["broadcast"] = local
        return out
    if config.data_parallel == "fsdp":
        full = local * world_size
        wire = 2 if config.fsdp_mixed_precision else 4
        full_wire = full * wire // 4
        gathers = (2 if config.reshard_after_forward else 1) * config.grad_accum_steps
        return {"all_gather": full_wire * gathers, "reduce_scatter": full_wire * syncs}
    return {}


def microbench_bytes(config: TrialConfig) -> int:
    """The payload of one collective call: a DDP bucket (25 MB by default), smaller when the model is."""
    return int((config.bucket_cap_mb or 25.0) * 1024 * 1024)


def memory_model(ranks: list[RankMetrics], config: TrialConfig) -> list[Any]:
    """Bytes per rank of the training state under DDP and ZeRO-1/2/3 (perfscope.measure.memory), from one whole
    replica — the sum of the ranks' shards where this run sharded — with this run's own row measured: the most any
    rank held, counted from its tensors."""
    if config.model_parallel > 1:
        return []  # a TP/PP rank holds a slice of one replica, not a ZeRO shard: perfscope.search.layout models it
    if not ranks or any(r.parameter_bytes is None or r.gradient_bytes is None or r.optimizer_state_bytes is None
                        for r in ranks):
        return []
    first = ranks[0]
    sharded_params = config.data_parallel == "fsdp"
    sharded_state = config.data_parallel in ("fsdp", "zero1")
    params = sum(r.parameter_bytes or 0 for r in ranks) if sharded_params else first.parameter_bytes or 0
    grads = sum(r.gradient_bytes or 0 for r in ranks) if sharded_params else first.gradient_bytes or 0
    state = sum(r.optimizer_state_bytes or 0 for r in ranks) if sharded_state else first.optimizer_state_bytes or 0
    rows = sharding_memory(params, grads, state, len(ranks))
    ran = strategy_of(config)
    for row in rows:
        if row.strategy == ran:
            row.measured_total = max((r.parameter_bytes or 0) + (r.gradient_bytes or 0) + (r.optimizer_state_bytes or 0)
                                     for r in ranks)
            row.measured_by = "this run"
    return rows


def job_result(metrics: Any, config: TrialConfig, info: RankInfo, gathered: list[Any], launch: Launch) -> Any:
    """Rank 0's metrics turned into the job's: every rank's figures, the job's throughput, communication."""
    ranks = [from_jsonable(RankMetrics, g[0], f"rank[{i}]") for i, g in enumerate(gathered)]
    comms = [from_jsonable(CommunicationFacts, g[1], f"communication[{i}]") for i, g in enumerate(gathered) if g[1]]
    facts = combine_ranks(ranks, backend=info.backend, data_parallel=config.data_parallel,
                          nnodes=launch.nnodes, nproc_per_node=launch.nproc_per_node,
                          global_batch=config.global_batch, model_parallel=config.model_parallel)
    if comms:
        # The rank that waited least in collectives: its exposed time is the network's, not a wait for a peer.
        facts.communication = min(comms, key=lambda c: c.exposed_collective_s)
    else:
        facts.unavailable["communication"] = metrics.unavailable.get("trace", msg("no_trace_captured"))
    facts.memory_model = memory_model(ranks, config)
    facts.numa_nodes = numa_node_count()
    facts.numa_binding = config.numa_binding
    metrics.distributed = facts  # the session makes the figures the job's (perfscope.measure.ranks.apply_job)
    return metrics


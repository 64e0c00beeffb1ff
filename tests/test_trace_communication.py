"""Communication against compute from one rank's trace: real 2-rank gloo traces (DDP, FSDP2), hand-built ones
with known overlaps, and the bus-bandwidth convention."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfscope.trace.communication import NO_COLLECTIVES, bus_bandwidth_gbps, collective_op, communication_facts

GLOO = Path(__file__).parent / "data" / "traces" / "gloo"  # written by tests/gloo_traces.py


def _x(name: str, cat: str, ts: float, dur: float, *, tid: int = 1, pid: int = 7, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _write(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return path


# ------------------------------------------------------------------------------------------ the convention


def test_bus_bandwidth_follows_nccl_tests():
    assert bus_bandwidth_gbps("all_reduce", 1e9, 1.0, 4) == pytest.approx(1.5)  # 2(n-1)/n
    assert bus_bandwidth_gbps("all_gather", 1e9, 1.0, 4) == pytest.approx(0.75)  # (n-1)/n
    assert bus_bandwidth_gbps("reduce_scatter", 1e9, 0.5, 2) == pytest.approx(1.0)
    assert bus_bandwidth_gbps("broadcast", 1e9, 1.0, 8) == pytest.approx(1.0)
    assert bus_bandwidth_gbps("all_reduce", 1e9, 1.0, 1) is None  # a world of one uses no link
    assert bus_bandwidth_gbps("send_recv", 1e9, 1.0, 2) is None
    assert bus_bandwidth_gbps("all_reduce", 1e9, 0.0, 2) is None


@pytest.mark.parametrize(("name", "op"), [
    ("gloo:all_reduce", "all_reduce"),
    ("gloo:all_gather", "all_gather"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
    ("ncclDevKernel_Broadcast_RING_LL", "broadcast"),
    ("c10d::allreduce_", "all_reduce"),
    ("c10d::_allgather_base_", "all_gather"),
    ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("_c10d_functional::all_gather_into_tensor", "all_gather"),
    ("_c10d_functional::wait_tensor", None),
    ("aten::mm", None),
    ("autograd::engine::evaluate_function: AddmmBackward0", None),
])
def test_collective_names(name, op):
    assert collective_op(name) == op


# ------------------------------------------------------------------------------------ real gloo traces


@pytest.mark.parametrize("rank", [0, 1])
def test_ddp_gloo_trace(rank):
    facts = communication_facts(GLOO / "ddp" / f"rank{rank}.json.gz", rank=rank, device_type="cpu", steps=3, world_size=2)
    assert facts.rank == rank and facts.step_s > 0
    assert 0 < facts.exposed_collective_s <= facts.collective_s < facts.step_s
    assert 0 < facts.compute_s < facts.step_s
    assert facts.compute_s + facts.exposed_collective_s <= facts.step_s  # exposed time is time without compute
    assert facts.overlap_share is not None and 0 < facts.overlap_share < 1  # DDP buckets overlap the backward
    [stat] = facts.collectives
    assert stat.op == "all_reduce" and stat.calls_per_step == 3  # three 1 MB buckets
    assert stat.bytes_per_step == 4 * (256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 256 + 256)  # the gradients, fp32
    assert stat.time_s_per_step <= facts.collective_s and stat.bus_gbps > 0


def test_fsdp2_gloo_trace_does_not_count_waiting_as_compute():
    """FSDP2 on gloo waits for every all-gather and reduce: inside `FSDP::pre_forward` and inside the autograd
    node `RegisterPostBackwardFunctionBackward`, with no op beneath. Counting those wrappers as compute read
    63% of its collective time as overlapped; the dispatcher ops beneath them overlap none of it."""
    facts = communication_facts(GLOO / "fsdp2" / "rank0.json.gz", rank=0, device_type="cpu", steps=3, world_size=2)
    assert facts.overlap_share is not None and facts.overlap_share < 0.2
    assert facts.exposed_collective_s > 0.8 * facts.collective_s
    ops = {c.op: c for c in facts.collectives}
    assert set(ops) == {"all_gather", "all_reduce"}  # gloo has no reduce-scatter: FSDP2's shows as an all-reduce
    params = 4 * (256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 256 + 256)
    assert ops["all_gather"].bytes_per_step == 2 * params  # every unit gathered for the forward and the backward
    assert ops["all_reduce"].bytes_per_step == params


def test_payload_bytes_replace_the_traced_sizes():
    path = GLOO / "ddp" / "rank0.json.gz"
    traced = communication_facts(path, rank=0, device_type="cpu", steps=3, world_size=2).collectives[0]
    given = communication_facts(path, rank=0, device_type="cpu", steps=3, world_size=2,
                                payload_bytes={"all_reduce": 2 * traced.bytes_per_step}).collectives[0]
    assert given.bytes_per_step == 2 * traced.bytes_per_step
    assert given.bus_gbps == pytest.approx(2 * traced.bus_gbps)


# ------------------------------------------------------------------------------- known overlaps, exact


def test_cpu_gloo_overlap_exact(tmp_path):
    """Main thread (tid 1): compute, the enqueue, a wrapper spanning the wait; gloo thread (tid 2): the collective."""
    def step(i: int, t0: float) -> list[dict]:
        return [
            _x(f"ProfilerStep#{i}", "user_annotation", t0, 1000),
            _x("perfscope::data", "user_annotation", t0, 100),
            _x("aten::randn", "cpu_op", t0 + 10, 80),  # the Dataset's: data wait, not compute
            _x("aten::mm", "cpu_op", t0 + 100, 300),
            _x("c10d::allreduce_", "cpu_op", t0 + 400, 20, **{"Input Dims": [[[1000]]], "Input type": ["TensorList"]}),
            _x("aten::add_", "cpu_op", t0 + 420, 180),
            _x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", t0 + 600, 300),  # waits: no op beneath
            _x("gloo:all_reduce", "user_annotation", t0 + 450, 400, tid=2, **{"Input Dims": [[1000]], "Input type": ["float"]}),
            _x("aten::copy_", "cpu_op", t0 + 500, 50, tid=2),  # gloo's own copy: the collective's
        ]
    events = step(1, 0) + step(2, 1000) + [
        _x("gloo:broadcast", "user_annotation", 1900, 50, tid=2, **{"Input Dims": [[10]], "Input type": ["float"]}),
    ]
    facts = communication_facts(_write(tmp_path, events), rank=0, device_type="cpu", steps=2, world_size=2)
    # per step: collective [400, 420] ∪ [450, 850] (+ a 50 µs broadcast in step 2); compute [100, 400] ∪ [420, 600];
    # exposed [400, 420] ∪ [600, 850] (+ the broadcast)
    assert facts.step_s == pytest.approx(1e-3)
    assert facts.compute_s == pytest.approx(480e-6)
    assert facts.collective_s == pytest.approx(445e-6)
    assert facts.exposed_collective_s == pytest.approx(295e-6)
    assert facts.overlap_share == pytest.approx(300 / 890)
    stats = {c.op: c for c in facts.collectives}
    assert stats["all_reduce"].calls_per_step == 1 and stats["all_reduce"].time_s_per_step == pytest.approx(400e-6)
    assert stats["all_reduce"].bytes_per_step == 4000
    assert stats["all_reduce"].bus_gbps == pytest.approx(4000 / 400e-6 * 1.0 / 1e9)  # 2(n-1)/n = 1 for n = 2
    assert stats["broadcast"].calls_per_step == 0.5 and stats["broadcast"].bytes_per_step == 20
    assert stats["broadcast"].bus_gbps == pytest.approx(20 / 25e-6 / 1e9)
    assert [c.op for c in facts.collectives] == ["all_reduce", "broadcast"]  # longest first


def test_cuda_nccl_overlap_exact(tmp_path):
    """NCCL kernels on their stream against compute kernels and copies on another; host ops do not count."""
    nccl = {"Collective name": "allreduce", "In msg nelems": 250_000, "Out msg nelems": 250_000, "dtype": "Float",
            "Group size": 4}
    gather = {"Collective name": "_allgather_base", "In msg nelems": 250, "Out msg nelems": 1000, "dtype": "BFloat16",
              "Group size": 4}
    events = [
        _x("ProfilerStep#5", "user_annotation", 0, 1000),
        _x("aten::mm", "cpu_op", 0, 900),  # host time: not device compute
        _x("ampere_sgemm_128x64_nn", "kernel", 0, 500, pid=0, tid=7),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", 300, 500,
           pid=0, tid=20, **nccl),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 850, 50, pid=0, tid=7),
        _x("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", 900, 50, pid=0, tid=20,
           **gather),
        _x("Stream Sync", "cuda_sync", 0, 1000, pid=0, tid=7),  # a host sync's record, not work
    ]
    facts = communication_facts(_write(tmp_path, events), rank=3, device_type="cuda", steps=1, world_size=4)
    assert facts.rank == 3
    assert facts.compute_s == pytest.approx(550e-6)
    assert facts.collective_s == pytest.approx(550e-6)
    assert facts.exposed_collective_s == pytest.approx(350e-6)  # [500, 800] and the all-gather
    assert facts.overlap_share == pytest.approx(200 / 550)
    stats = {c.op: c for c in facts.collectives}
    assert stats["all_reduce"].bytes_per_step == 1_000_000
    assert stats["all_reduce"].bus_gbps == pytest.approx(1e6 / 500e-6 * 1.5 / 1e9)
    assert stats["all_gather"].bytes_per_step == 2000  # the gathered output, bf16
    assert stats["all_gather"].bus_gbps == pytest.approx(2000 / 50e-6 * 0.75 / 1e9)


def test_a_trace_without_collectives(tmp_path):
    events = [_x("ProfilerStep#0", "user_annotation", 0, 100), _x("aten::mm", "cpu_op", 10, 50)]
    facts = communication_facts(_write(tmp_path, events), rank=0, device_type="cpu", steps=1, world_size=2)
    assert facts.collective_s == 0 and facts.exposed_collective_s == 0 and facts.overlap_share is None
    assert facts.collectives == [] and NO_COLLECTIVES in facts.notes
    assert facts.compute_s == pytest.approx(50e-6)

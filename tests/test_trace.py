"""Trace capture and trace facts: real CPU traces, and synthetic CUDA traces for the GPU-only facts."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from perfscope.measure.peaks import alignment_dtypes, benchmark_alignment, benchmark_alignment_for
from perfscope.results import GemmShape
from perfscope.results.messages import msg
from perfscope.trace.capture import TraceCapture
from perfscope.trace.facts import trace_facts
from tests.kineto import ADD_BF16, KinetoTrace

FIXTURES = Path(__file__).parent / "data" / "traces"


def _train_with_capture(trace_dir: Path, *, sleep_s: float = 0.01, **kw) -> TraceCapture:
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with TraceCapture(trace_dir, device="cpu", **kw) as cap:
        for _ in range(cap.total_steps):
            with torch.profiler.record_function("perfscope::data"):
                time.sleep(sleep_s)
                x = torch.randn(32, 64)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    return cap


def test_capture_writes_a_gzipped_chrome_trace_and_facts_see_the_data_wait(tmp_path):
    cap = _train_with_capture(tmp_path / "trace", sleep_s=0.04)  # data wait dominates even on a loaded machine
    assert cap.path == tmp_path / "trace" / "rank0.json.gz" and cap.note is None
    events = json.load(gzip.open(cap.path))["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events)
    facts = trace_facts(cap.path, device_type="cpu", steps=cap.active)
    assert facts.steps == 3
    # 40 ms of sleep per step: at least that much data wait, whatever the load does to the compute (a fraction of
    # the step would depend on how slow a loaded machine makes the rest of it)
    assert facts.data_wait_fraction * facts.step_time_s >= 0.038
    assert facts.kernels.time_by_category.get("gemm", 0) > 0
    misaligned = [g for g in facts.gemm_shapes if g.misaligned]
    assert any(10 in g.shape for g in misaligned)  # the 128→10 layer is not a multiple of 4
    assert facts.gpu is None


def test_committed_cpu_fixture_still_parses():
    facts = trace_facts(FIXTURES / "cpu_only" / "mlp_data_wait.json.gz", device_type="cpu", steps=3)
    assert facts.steps == 3 and facts.data_wait_fraction > 0.5
    assert facts.kernels.top[0].time_s >= facts.kernels.top[-1].time_s


def test_a_running_profiler_is_left_alone(tmp_path):
    with torch.profiler.profile():
        cap = _train_with_capture(tmp_path / "trace", sleep_s=0)
    assert cap.path is None and cap.note == msg("capture_profiler_running")


def test_size_cap_drops_the_trace_with_a_note(tmp_path):
    cap = _train_with_capture(tmp_path / "trace", sleep_s=0, max_bytes=100)
    assert cap.path is None and cap.note is not None and cap.note.code == "trace_too_large"
    assert cap.note.params["max_bytes"] == 100 and cap.note.params["size"] > 100
    assert not list((tmp_path / "trace").iterdir())  # nor a temp file of the atomic write


# ------------------------------------------------------------------------------ synthetic CUDA traces


def _x(name: str, cat: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 0, "args": args}


def _write(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "cuda.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return path


def _step(i: int, start: float, length: float) -> dict:
    return _x(f"ProfilerStep#{i}", "user_annotation", start, length)


def test_launch_bound_step(tmp_path):
    t = KinetoTrace()
    with t.step(0):
        for _ in range(500):  # 500 kernels of 4 µs, each costing the host ~16 µs to dispatch and launch
            with t.op("aten::add", dispatch_us=10):
                t.launch(ADD_BF16, 4, call_us=5)
    facts = trace_facts(t.write(tmp_path / "t.json.gz"), device_type="cuda", steps=1)
    assert facts.launch.launch_bound is True
    assert facts.launch.kernels_per_step == 500 and facts.launch.median_kernel_us == 4
    assert facts.gpu.idle_fraction > 0.7
    assert facts.gpu.idle.host_s > 0.7 * facts.step_time_s


def test_data_stall_sync_pageable_and_fp32_gemm(tmp_path):
    t = KinetoTrace()
    with t.step(0):
        with t.annotation("perfscope::data"):
            t.work(6_000)
        with t.op("aten::copy_"):
            t.memcpy("Memcpy HtoD (Pageable -> Device)", 8 * 2**20, 500, blocking=True)
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 2_000)
        with t.op("aten::mm"):
            t.launch("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 500)
        with t.op("aten::item"), t.op("aten::_local_scalar_dense"):
            t.synchronize()
    facts = trace_facts(t.write(tmp_path / "t.json.gz"), device_type="cuda", steps=1)
    assert facts.gpu.idle.data_wait_s == pytest.approx(0.006)
    assert facts.data_wait_fraction == pytest.approx(0.006 / facts.step_time_s)
    assert facts.pageable_memcpy.count == 1 and facts.pageable_memcpy.bytes == 8 * 2**20
    assert facts.kernels.fp32_gemm_fraction == pytest.approx(0.8)
    assert facts.sync.events_per_step == {"cudaStreamSynchronize": 1}  # the runtime call that waited, not its wrappers
    assert facts.sync.sites == {"aten::item > aten::_local_scalar_dense": 1}
    assert facts.launch.launch_bound is False
    assert facts.kernels.time_by_category["gemm"] == pytest.approx(0.0025)


def test_hopper_gemm_kernels_count_as_gemm_and_fp32_by_name(tmp_path):
    events = [
        _step(0, 0, 10_000),
        _x("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "kernel", 1_000, 3_000),  # bf16 on tensor cores
        _x("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_batched_kernel__5x_cublas",
           "kernel", 4_000, 1_000),  # fp32, though its name holds an "h"
        _x("triton_tem_fused_mm_0", "kernel", 5_000, 1_000),  # dtype not in the name: not counted as fp32
    ]
    facts = trace_facts(_write(tmp_path, events), device_type="cuda", steps=1)
    assert facts.kernels.time_by_category == {"gemm": pytest.approx(0.005)}
    assert facts.kernels.fp32_gemm_fraction == pytest.approx(0.2)


def test_alignment_benchmark_measures_both_shapes_on_cpu():
    shapes = [GemmShape(op="aten::mm", shape=[256, 250, 250], dtype="float", count=1, time_s=1e-3, time_source="cpu op", misaligned=["k", "n"]),
              GemmShape(op="aten::mm", shape=[4, 10, 32], dtype="float", count=1, time_s=1e-6, time_source="cpu op", misaligned=["n"])]
    rows = benchmark_alignment(shapes, device="cpu", repeats=5)
    assert len(rows) == 1
    row = rows[0]
    assert row.padded == [256, 256, 256] and row.time_s > 0 and row.padded_time_s > 0
    assert row.speedup_per_flop > 0


@pytest.mark.parametrize(("precision", "dtypes"), [("fp32", ["fp32", "bf16"]), ("bf16", ["bf16"]), ("fp16", ["fp16"])])
def test_an_fp32_runs_shapes_are_also_benchmarked_in_the_bf16_a_recommendation_would_run(precision, dtypes):
    shapes = [GemmShape(op="aten::mm", shape=[256, 250, 250], dtype="float", count=1, time_s=1e-3, time_source="cpu op",
                        misaligned=["k", "n"])]
    assert alignment_dtypes(precision) == dtypes
    rows = benchmark_alignment_for(shapes, device="cpu", precision=precision)
    assert [r.dtype for r in rows] == dtypes and all(r.time_s > 0 and r.padded_time_s > 0 for r in rows)

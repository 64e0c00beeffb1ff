"""Trace facts on CUDA-structured Kineto traces (tests/data/traces/cuda, built by tests/kineto.py).

Each test pins one behaviour the GPU path got wrong: duplicated annotations, GEMM time taken from host
launch time, sync spans counted several times, and GPU-bound steps called launch-bound.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfscope.results import TraceFacts
from perfscope.trace.facts import trace_facts
from tests.kineto import FIXTURES, KinetoTrace, bf16_gpu_bound_with_item

GPU_BOUND = FIXTURES / "h100_bf16_gpu_bound_item.json.gz"
LAUNCH_BOUND = FIXTURES / "h100_fp32_launch_bound.json.gz"
COMPILED = FIXTURES / "h100_compiled_bf16.json.gz"


def _facts(path: Path) -> TraceFacts:
    return trace_facts(path, device_type="cuda", steps=3)


def _older_torch(tmp_path: Path, **shape) -> Path:
    """The GPU-bound scenario in the shape older torch wrote: no gpu_user_annotation copies."""
    trace = KinetoTrace(gpu_annotations=False, **shape)
    built = bf16_gpu_bound_with_item()
    trace.events = [e for e in built.events if e.get("cat") != "gpu_user_annotation"]
    if shape.get("step_cat") == "cpu_op":
        for e in trace.events:
            if e.get("name", "").startswith("ProfilerStep#"):
                e["cat"] = "cpu_op"
    return trace.write(tmp_path / "older.json.gz")


# ------------------------------------------------------------------------------ 1. duplicated annotations


def test_the_fixture_has_the_gpu_copies_of_each_annotation():
    events = json.load(gzip.open(GPU_BOUND))["traceEvents"]
    steps = [(e["cat"], e["name"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert sorted(steps) == sorted([(c, f"ProfilerStep#{n}") for n in (2, 3, 4) for c in ("user_annotation", "gpu_user_annotation")])
    assert sum(e.get("name") == "perfscope::data" for e in events) == 3  # the data span launches nothing: no GPU copy


def test_steps_are_counted_once_and_per_step_figures_are_not_halved():
    facts = _facts(GPU_BOUND)
    assert facts.steps == 3
    assert facts.step_time_s == pytest.approx(0.0242, rel=0.01)
    assert facts.launch.kernels_per_step == 261  # 4×(1+1+30) + 1 + 1 forward, 2 + 4×(2+30) backward, 1 optimizer
    assert facts.pageable_memcpy.count == 1
    assert facts.gpu.idle.data_wait_s == pytest.approx(0.0025, rel=0.01)
    assert facts.kernels.time_by_category["gemm"] == pytest.approx(0.0198)
    assert facts.data_wait_fraction == pytest.approx(0.0025 / facts.step_time_s, rel=0.01)


def test_a_data_annotation_that_launched_work_is_counted_once(tmp_path):
    t = KinetoTrace()
    with t.step(0):
        with t.annotation("perfscope::data"):  # the copy inside the data span: its GPU copy spans the memcpy
            t.work(1_000)
            with t.op("aten::copy_"):
                t.memcpy("Memcpy HtoD (Pinned -> Device)", 2**20, 100, blocking=False)
        t.work(1_000)
    path = t.write(tmp_path / "t.json.gz")
    assert sum(e.get("name") == "perfscope::data" for e in json.load(gzip.open(path))["traceEvents"]) == 2
    facts = trace_facts(path, device_type="cuda", steps=1)
    assert facts.data_wait_fraction == pytest.approx(0.5, abs=0.01)


def test_profiler_steps_recorded_as_cpu_ops_by_older_torch(tmp_path):
    facts = trace_facts(_older_torch(tmp_path, step_cat="cpu_op"), device_type="cuda", steps=3)
    assert facts.steps == 3 and facts.launch.kernels_per_step == 261


# ------------------------------------------------------------------------------ 3. GEMM time from kernels


def test_gemm_shape_time_is_the_device_time_of_the_kernels_the_op_launched():
    shapes = {tuple(g.shape): g for g in _facts(GPU_BOUND).gemm_shapes}
    head = shapes[(4096, 1024, 50257)]  # aten::addmm of the vocabulary head: one 3 ms nvjet kernel a step
    assert head.misaligned == ["n"] and head.time_source == "kernels"
    assert head.time_s == pytest.approx(0.003)
    assert shapes[(4096, 50257, 1024)].time_s == pytest.approx(0.003)  # backward mm on the autograd thread
    assert shapes[(4096, 1024, 1024)].count == 4 and shapes[(4096, 1024, 1024)].time_s == pytest.approx(0.0036)


def test_kernels_link_through_flow_events_when_the_correlation_arg_is_missing(tmp_path):
    data = json.load(gzip.open(GPU_BOUND))
    for e in data["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "cuda_runtime"):
            e["args"].pop("correlation", None)
    path = tmp_path / "flows.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(data, fh)
    shapes = {tuple(g.shape): g for g in _facts(path).gemm_shapes}
    assert shapes[(4096, 1024, 50257)].time_s == pytest.approx(0.003)


def test_kernels_without_a_launch_link_join_their_op_by_external_id(tmp_path):
    t = KinetoTrace()
    with t.step(0), t.op("aten::mm", dims=[[64, 100], [100, 64]], types=["float", "float"]):
        t.launch("ampere_sgemm_32x32_sliced1x4_tn", 700)
    t.events = [e for e in t.events if e.get("cat") != "cuda_runtime" and e.get("ph") == "X"]  # launch call lost
    facts = trace_facts(t.write(tmp_path / "t.json.gz"), device_type="cuda", steps=1)
    assert facts.gemm_shapes[0].time_s == pytest.approx(700e-6)


def test_misaligned_gemm_rule_fires_on_the_gpu_trace():
    from perfscope.rules import run_rules
    from tests.factories import make_results

    results = make_results()
    results.trials[0].metrics.trace_facts = _facts(GPU_BOUND)
    finding = next(f for f in run_rules(results) if f.rule_id == "PS401")
    assert "4096×1024×50257" in finding.evidence[0]


# ------------------------------------------------------------------------------ 4. idle attribution


def test_a_gpu_bound_step_with_an_item_is_not_launch_bound(tmp_path):
    # Many 4 µs kernels (261 a step, median 4 µs) but the host spends most of the step blocked in .item():
    # counting that as host busy time called this step launch-bound.
    for path in (GPU_BOUND, _older_torch(tmp_path)):
        facts = _facts(path)
        assert facts.launch.kernels_per_step >= 200 and facts.launch.median_kernel_us < 20
        assert facts.launch.launch_bound is False
        assert facts.gpu.idle.host_s == pytest.approx(0.0, abs=1e-5)
        assert facts.launch.host_active_s < facts.gpu.busy_s


def test_one_item_is_one_sync_point():
    facts = _facts(GPU_BOUND)
    assert facts.sync.points_per_step == 1
    assert facts.sync.events_per_step == {"cudaStreamSynchronize": 1}
    assert facts.sync.sites == {"aten::item > aten::_local_scalar_dense (DtoH copy)": 1}


def test_idle_is_attributed_once_and_adds_up(tmp_path):
    """GPU idle while the host sits in item → _local_scalar_dense → cudaStreamSynchronize: one sync wait."""
    t = KinetoTrace()
    with t.step(0):
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 1_000)
        t.gpu_free += 5_000  # the stream waits on another stream's event: the sync returns 5 ms after the kernel
        with t.op("aten::item"), t.op("aten::_local_scalar_dense"):
            t.synchronize()
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 1_000)
    facts = trace_facts(t.write(tmp_path / "t.json.gz"), device_type="cuda", steps=1)
    idle = facts.gpu.idle
    assert idle.total_s == pytest.approx(facts.gpu.idle_fraction * facts.step_time_s)
    assert idle.sync_s == pytest.approx(0.005, rel=0.01)  # once, not three times


def test_a_launch_bound_step_is_launch_bound():
    facts = _facts(LAUNCH_BOUND)
    assert facts.launch.launch_bound is True
    assert facts.gpu.idle.host_s > 0.7 * facts.step_time_s
    assert facts.gpu.idle_fraction > 0.7


def test_queued_work_waiting_on_something_else_is_not_the_hosts_fault(tmp_path):
    t = KinetoTrace()
    with t.step(0):
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 1_000)
        t.gpu_free += 2_000  # the next kernel waits 2 ms for an event on another stream, already launched
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 1_000)
        t.work(3_500)
    idle = trace_facts(t.write(tmp_path / "t.json.gz"), device_type="cuda", steps=1).gpu.idle
    assert idle.other_s == pytest.approx(0.002, rel=0.01)


# ------------------------------------------------------------------------------ 2. categories, compiled


def test_compiled_step_counts_triton_templates_as_gemm():
    facts = _facts(COMPILED)
    assert facts.kernels.time_by_category["gemm"] == pytest.approx(0.0032)
    assert facts.kernels.time_by_category["elementwise"] == pytest.approx(0.00028)
    assert facts.launch.host_launch_s > 0  # cuLaunchKernel (driver API) counts as a launch


# ------------------------------------------------------------------------------ 3. host<->device traffic


def test_host_transfers_count_every_copy_each_way_and_the_share_kernels_hid(tmp_path):
    """What activation offloading adds: device→host copies in forward, host→device in backward, on a side stream."""
    t = KinetoTrace()
    with t.step(0):
        with t.op("aten::mm"):
            t.launch("ampere_sgemm_128x64_nn", 1_000)
        with t.op("aten::copy_"):
            t.memcpy("Memcpy DtoH (Device -> Pinned)", 3 * 2**20, 400, blocking=False)
        with t.op("aten::copy_"):
            t.memcpy("Memcpy HtoD (Pinned -> Device)", 2**20, 200, blocking=False)
        with t.op("aten::copy_"):
            t.memcpy("Memcpy DtoD (Device -> Device)", 2**30, 100, blocking=False)  # stays on the device
        t.work(2_000)
    trace = t.to_json()
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    d2h = next(e for e in trace["traceEvents"] if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"])
    d2h["ts"], d2h["tid"] = kernel["ts"] + 100, t.stream + 1  # a copy stream: the kernel hides all of it
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    copies = trace_facts(path, device_type="cuda", steps=1).host_transfers
    assert copies.d2h_bytes == 3 * 2**20 and copies.h2d_bytes == 2**20
    assert copies.time_s == pytest.approx(600e-6)
    assert copies.overlapped_fraction == pytest.approx(400 / 600)
    assert trace_facts(path, device_type="cpu", steps=1).host_transfers is None


# ------------------------------------------------------------------------------ 5. waits the host really made


def _default_adamw_step(t: KinetoTrace, n: int, params: int = 148) -> None:
    """A GPU-bound bf16 step whose optimizer is torch.optim.AdamW at its defaults (foreach): per parameter tensor
    it reads the step counter it keeps on the host with `.item()` (aten::item > aten::_local_scalar_dense on a
    CPU tensor: no runtime call, no wait), then launches the foreach kernels. No loss.item()."""
    from tests.kineto import HIDDEN, TOKENS, _linear, _mm

    with t.step(n):
        for _ in range(4):
            _linear(t, TOKENS, HIDDEN, HIDDEN, 900)
        with t.thread(t.pid + 1):
            for _ in range(4):
                _mm(t, TOKENS, HIDDEN, HIDDEN, 900)
                _mm(t, HIDDEN, TOKENS, HIDDEN, 900)
        for _ in range(params):
            with t.op("aten::item", dispatch_us=2), t.op("aten::_local_scalar_dense", dispatch_us=1):
                pass
        for name in ("aten::_foreach_add_", "aten::_foreach_lerp_", "aten::_foreach_mul_", "aten::_foreach_addcdiv_"):
            with t.op(name):
                t.launch("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<Foreach>", 60)


def test_default_adamw_host_items_are_not_syncs_and_ps302_stays_silent(tmp_path):
    from perfscope.rules import run_rules
    from tests.factories import make_results

    t = KinetoTrace()
    for n in range(2, 5):
        _default_adamw_step(t, n)
    facts = _facts(t.write(tmp_path / "adamw.json.gz"))
    assert facts.sync.points_per_step == 0 and facts.sync.events_per_step == {} and facts.sync.sites == {}
    assert facts.gpu.idle.sync_s == 0 and facts.sync.gpu_idle_after_s == 0
    results = make_results()
    results.trials[0].metrics.trace_facts = facts
    assert [f.rule_id for f in run_rules(results) if f.rule_id in ("PS301", "PS302")] == []


def test_a_wait_inside_a_user_frame_is_attributed_to_that_line(tmp_path):
    t = KinetoTrace()
    with t.step(2):
        _linear_and_item_in_frame(t)
    facts = _facts(t.write(tmp_path / "stack.json.gz"))
    assert facts.sync.sites == {"aten::item > aten::_local_scalar_dense (DtoH copy) at train.py(42): train_step": 1}


def _linear_and_item_in_frame(t: KinetoTrace) -> None:
    """loss.item() called from train.py line 42, in a trace recorded with_stack=True (python_function frames)."""
    from tests.kineto import HIDDEN, TOKENS, _linear, _loss_item

    start = t.now
    _linear(t, TOKENS, HIDDEN, HIDDEN, 900)
    frame_start = t.now
    _loss_item(t)
    torch_frame = {"name": "torch/_tensor.py(1023): item", "ph": "X", "cat": "python_function", "ts": frame_start,
                   "dur": t.now - frame_start, "pid": t.pid, "tid": t.tid, "args": {}}
    user_frame = dict(torch_frame, name="train.py(42): train_step", ts=start, dur=t.now - start + 1)
    t.events += [user_frame, torch_frame]


def test_gemm_shape_of_an_addmm_with_out_as_inductor_calls_it(tmp_path):
    """Inductor calls extern_kernels.addmm(bias, a, b, out=buf): the profiler records (bias, a, b, out); the shape
    is a's and b's, whatever the bias's rank."""
    t = KinetoTrace()
    with t.step(2):
        with t.op("aten::addmm", dims=[[1024], [4096, 768], [768, 1024], [], [], [4096, 1024]],
                  types=["c10::BFloat16"] * 3 + ["Scalar", "Scalar", "c10::BFloat16"], dispatch_us=8):
            t.launch("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 500)
        with t.op("aten::mm", dims=[[4096, 1024], [1024, 50257], [4096, 50257]], types=["c10::BFloat16"] * 3):
            t.launch("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 500)
    facts = trace_facts(t.write(tmp_path / "inductor.json.gz"), device_type="cuda", steps=1)
    shapes = {(g.op, tuple(g.shape)) for g in facts.gemm_shapes}
    assert shapes == {("aten::addmm", (4096, 768, 1024)), ("aten::mm", (4096, 1024, 50257))}


def test_a_loss_item_that_drains_the_queue_is_a_finding_with_its_site():
    from perfscope.rules import run_rules
    from tests.factories import make_results

    results = make_results()
    results.trials[0].metrics.trace_facts = facts = _facts(GPU_BOUND)
    # the wait drains the queue, so the next step's 2.5 ms data wait runs with the GPU idle: that is its cost (in two
    # of the three traced steps: the first step's wait follows a step outside the trace)
    assert facts.sync.gpu_idle_after_s == pytest.approx(2 / 3 * (facts.gpu.idle.sync_s + facts.gpu.idle.data_wait_s), rel=0.02)
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS302"]
    assert "aten::item > aten::_local_scalar_dense (DtoH copy) ×1" in finding.evidence[0]


def test_the_gpu_starvation_is_attributed_to_the_ops_whose_launches_it_waited_for():
    facts = _facts(LAUNCH_BOUND)
    assert set(facts.launch.starved_by) >= {"aten::mm", "aten::linear", "aten::relu", "aten::threshold_backward"}
    assert sum(facts.launch.starved_by.values()) == pytest.approx(facts.gpu.idle.host_s, rel=1e-6)

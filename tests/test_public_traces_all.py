"""Every public trace file (HTA's 31 test files and param's trace without step markers) through `perfscope trace`, and
traces of the same kinds made here: old Kineto spellings, broken events, a pre-Ampere GPU, a DataLoader-bound CPU loop.

None crashes; every refusal is a true non-trace (tests/public_traces.NOT_TRACES) with a one-line reason; each training
trace's figures agree with an independent count from the raw JSON, written below with none of perfscope's trace code
(steps, step time, GPU busy share, communication and GEMM share of device time, host waits per step) within 2 points.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
from itertools import pairwise
from pathlib import Path

import pytest

from perfscope.errors import UserError
from perfscope.rules import run_rules
from perfscope.trace.communication import NO_COLLECTIVES
from perfscope.trace.facts import trace_facts
from perfscope.trace.offline import trace_results
from tests.kineto import KinetoTrace
from tests.public_traces import NOT_TRACES, TRACES, inside, public_trace, union

COMM = ("nccl", "rccl", "nvshmem", "deep_ep", "gloo", "msccl", "alltoall", "all_to_all", "allreduce", "all_reduce",
        "allgather", "all_gather", "reducescatter", "reduce_scatter")
GEMM = ("gemm", "gemv", "nvjet", "cutlass", "xmma", "hmma", "wgmma", "matmul")
NOT_GEMM = ("embedding", "conv", "implicit", "flash", "fmha", "attention", "norm", "winograd", "wgrad", "dgrad", "cudnn")
DEVICE = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
HOST = ("cpu_op", "user_annotation", "operator")


# ------------------------------------------------------------------------------------------ independent count


def _median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def raw_count(path: Path) -> dict[str, float] | None:
    """The figures from the JSON alone; None when the file is not a training trace (no steps or no device work).
    Steps: the ProfilerStep#N spans, else end to end between Optimizer.step#... spans, leading steps over twice the
    median of the rest dropped (one-time set-up)."""
    with gzip.open(path, "rt") as fh:
        data = json.load(fh)
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if isinstance(e, dict) and e.get("ph") == "X"]
    events = [e for e in events if math.isfinite(float(e.get("ts", "nan"))) and 0 <= float(e.get("dur", -1)) <= 86_400e6]
    def cat(e: dict) -> str:
        return str(e.get("cat", "")).lower()

    def name(e: dict) -> str:
        return str(e.get("name", ""))

    def span(e: dict) -> tuple[float, float]:
        return float(e["ts"]), float(e["ts"]) + float(e["dur"])

    marks: dict[str, tuple[float, float]] = {}
    for e in events:
        if cat(e) in HOST and name(e).startswith("ProfilerStep#"):
            marks.setdefault(name(e), (float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    spans = sorted(marks.values())
    if not spans:
        ends = sorted(float(e["ts"]) + float(e["dur"]) for e in events if cat(e) in HOST and name(e).startswith("Optimizer.step#"))
        spans = list(pairwise(ends))
        while len(spans) >= 3 and spans[0][1] - spans[0][0] > 2 * _median([b - a for a, b in spans[1:]]):
            spans = spans[1:]
    device = [e for e in events if cat(e) in DEVICE]
    if not spans or not device:
        return None
    first, last = spans[0][0], spans[-1][1]
    runtime = [e for e in events if cat(e) in ("cuda_runtime", "cuda_driver", "runtime")]
    launched = {(e.get("args") or {}).get("correlation"): float(e["ts"]) for e in runtime}
    issued = [e for e in device if first <= launched.get((e.get("args") or {}).get("correlation"), float(e["ts"])) <= last]
    steps_us = sum(b - a for a, b in spans)
    total = sum(float(e["dur"]) for e in issued) or 1.0
    kernels = [name(e).lower() for e in issued if DEVICE[cat(e)] == "kernel"]
    durs = [float(e["dur"]) for e in issued if DEVICE[cat(e)] == "kernel"]
    is_comm = [any(w in n for w in COMM) for n in kernels]
    is_gemm = [any(w in n for w in GEMM) and not any(w in n for w in NOT_GEMM) and not c for n, c in zip(kernels, is_comm)]
    loader = union([span(e) for e in events if cat(e) in HOST and name(e).startswith("enumerate(DataLoader)#")])
    waits = sum(1 for e in runtime if first <= float(e["ts"]) <= last
                and (name(e).endswith("Synchronize") or name(e) in ("cudaMemcpy", "hipMemcpyWithStream")))
    return {"steps": len(spans), "step_us": steps_us / len(spans),
            "busy": inside(union([span(e) for e in device]), spans) / steps_us,
            "communication": sum(d for d, c in zip(durs, is_comm) if c) / total,
            "gemm": sum(d for d, g in zip(durs, is_gemm) if g) / total, "waits": waits / len(spans),
            "data_wait": inside(loader, spans) / steps_us}


# ------------------------------------------------------------------------------------------ every public file


@pytest.mark.parametrize("name", sorted(TRACES))
def test_every_public_file_is_read_or_refused_as_a_non_trace_in_one_line(name):
    path = public_trace(name)
    if name in NOT_TRACES:
        with pytest.raises(UserError) as err:
            trace_results(path)
        message = str(err.value)
        assert message.startswith(f"{path}: ") and "\n" not in message and NOT_TRACES[name] in message
        return
    results = trace_results(path)  # never refused, never a crash
    results.findings = run_rules(results)
    metrics = results.trials[0].metrics
    assert metrics is not None and metrics.steps >= 1 and metrics.wall_s > 0


TRAINING = [
    "../param/linear_kineto", "amd_trace/mi250_minitoy_train_ROCm6_2_kineto", "critical_path/cuda_event_sync/event_sync_trace",
    "df_index_resolver/df_index_resolver", "nccl_parser_config/nccl_data", "negative_queue_length_values_check/rank0",
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace", "timeline_analysis/sampled_rank-0", "trace_compare/base/base",
    "trace_compare/test/test", "trace_diff/control/control", "trace_diff/test/test", "trace_filter/sampled_rank-0",
    "trace_filter/sampled_rank-1", "triton_example/triton_example",
    "../kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace",
    "../kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace",
]
"""Files with steps (ProfilerStep#N, else Optimizer.step#...) and device work; the others hold no step or no kernel."""


@pytest.mark.parametrize("name", sorted(n for n in TRACES if n not in NOT_TRACES))
def test_each_training_traces_figures_agree_with_an_independent_count(name):
    raw = raw_count(public_trace(name))
    if name not in TRAINING:
        assert raw is None, f"{name} has steps and device work: add it to TRAINING"
        return
    assert raw is not None
    facts = trace_facts(public_trace(name), device_type="cuda", steps=1)
    time = facts.kernels.time_by_category
    total = sum(time.values())
    assert facts.steps == raw["steps"]
    assert facts.step_time_s * 1e6 == pytest.approx(raw["step_us"], rel=1e-6)
    assert facts.gpu is not None and facts.gpu.busy_fraction == pytest.approx(raw["busy"], abs=0.02)
    assert time.get("communication", 0.0) / total == pytest.approx(raw["communication"], abs=0.02)
    assert time.get("gemm", 0.0) / total == pytest.approx(raw["gemm"], abs=0.02)
    assert sum(facts.sync.events_per_step.values()) == pytest.approx(raw["waits"], abs=0.02)
    assert facts.data_wait_fraction == pytest.approx(raw["data_wait"], abs=0.02)


def test_a_trace_without_step_markers_is_read_from_its_optimizer_steps_set_up_left_out():
    """param's linear model: 40 SGD steps in 2.0 s, the first second one-time set-up; 39 steps of ~25 ms, said so."""
    path = public_trace("../param/linear_kineto")
    facts = trace_facts(path, device_type="cuda", steps=1)
    assert facts.steps == 39 and facts.step_time_s < 0.05
    (found,) = [n for n in facts.notes if n.code == "steps_found_from"]
    source = found.params["source"]
    assert found.params["steps"] == 39 and "Optimizer.step#SGD.step" in source and "left out" in source


def test_the_old_spellings_file_is_read():
    facts = trace_facts(public_trace("trace_file_list/inference_rank_1"), device_type="cuda", steps=1)
    assert facts.launch.kernels_per_step == 4


def test_the_fbgemm_embedding_kernels_are_not_gemm():
    facts = trace_facts(public_trace("trace_filter/sampled_rank-0"), device_type="cuda", steps=1)
    assert facts.kernels.time_by_category.get("embedding", 0) > 0
    assert not [k for k in facts.kernels.top if "embedding" in k.name and k.category == "gemm"]


def test_a_cuda_trace_with_no_gpu_kernel_gets_no_launch_bound_finding():
    results = trace_results(public_trace("distributed_info_unavailable/distributed_info_not_found"))
    assert not [f for f in run_rules(results) if f.rule_id == "PS301"]


# ------------------------------------------------------------------------------------------ made here


def _loop(sgemm: str = "volta_sgemm_128x64_nn", steps: int = 4) -> KinetoTrace:
    t = KinetoTrace()
    for n in range(steps):
        with t.step(n):
            t.work(50)
            for _ in range(4):
                with t.op("aten::mm", dims=[[512, 512], [512, 512]]):
                    t.launch(sgemm, 900)
    return t


def _cased(doc: dict) -> dict:
    spelling = {"kernel": "Kernel", "cpu_op": "Operator", "cuda_runtime": "Runtime", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
    out = copy.deepcopy(doc)
    for e in out["traceEvents"]:
        e["cat"] = spelling.get(e.get("cat"), e.get("cat"))
    return out


def test_old_kineto_spellings_give_the_same_facts(tmp_path):
    doc = _loop().to_json()
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(json.dumps(doc))
    old.write_text(json.dumps(_cased(doc)))
    before, after = trace_facts(new, device_type="cuda", steps=1), trace_facts(old, device_type="cuda", steps=1)
    assert after.launch.kernels_per_step == 4 and dataclasses.replace(after, trace_bytes=0) == dataclasses.replace(before, trace_bytes=0)


@pytest.mark.parametrize("ts, dur, why", [(float("nan"), 5.0, "NaN"), (0.0, -3.0, "a negative duration"),
                                           (0.0, 1e300, "longer than a day"), (float("inf"), 1.0, "infinite")])
def test_a_broken_event_is_counted_skipped_and_said(ts, dur, why, tmp_path):
    doc = _loop().to_json()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    clean = trace_facts(good, device_type="cuda", steps=1)
    broken = copy.deepcopy(doc)
    kernel = next(e for e in broken["traceEvents"] if e.get("cat") == "kernel")
    broken["traceEvents"].append({**kernel, "ts": kernel["ts"] if ts == 0.0 else ts, "dur": dur})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    facts = trace_facts(bad, device_type="cuda", steps=1)
    assert facts.gpu.busy_fraction == clean.gpu.busy_fraction and facts.kernels == clean.kernels
    (note,) = [n for n in facts.notes if n.code == "unusable_events"]
    ((reason, count),) = note.params["counts"].items()
    assert count == 1 and why in reason


def test_a_trace_claiming_sm_70_gets_fp16_with_a_grad_scaler_never_bf16_or_tf32(tmp_path):
    doc = _loop().to_json()
    doc["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0,
                                "totalGlobalMem": 16945512448, "numSms": 80}]
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(doc))
    findings = run_rules(trace_results(path))
    (amp,) = [f for f in findings if f.rule_id == "PS101"]
    assert "fp16" in amp.title and "GradScaler" in amp.fix and "bfloat16" not in amp.fix
    assert not [f for f in findings if f.rule_id == "PS102"]
    assert not any("bf16" in f.title or "TF32" in f.title or "bfloat16" in (f.fix or "") for f in findings)


def test_a_cpu_loop_profiled_with_a_slow_dataloader_shows_the_loader_first(tmp_path):
    """torch.profiler on a real CPU training loop, num_workers=0 and a Dataset whose transform costs far more than the
    model's step: the DataLoader's own __next__ spans are the data wait (the Dataset's aten ops inside them are not the
    step's compute), and the loader is the top finding."""
    torch = pytest.importorskip("torch")
    import time

    class Slow(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            x = torch.randn(128, 128)  # a costly transform: ~17 MFLOP of matmuls a sample, in the training process
            for _ in range(4):
                x = torch.tanh(x @ x / 128)
            time.sleep(0.001)  # and a read from storage
            return x[0, :32].clone(), torch.randn(1)

    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=8, num_workers=0)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as prof:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    path = tmp_path / "cpu_loader.json"
    prof.export_chrome_trace(str(path))
    results = trace_results(path)
    assert results.trials[0].metrics.data_wait_share > 0.5
    findings = run_rules(results)
    assert findings[0].rule_id == "PS201"


def _distributed(t: KinetoTrace, path: Path, world_size: int = 2) -> Path:
    doc = t.to_json()
    doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": world_size}
    path.write_text(json.dumps(doc))
    return path


def test_deepep_dispatch_and_combine_are_communication_named_and_advised_as_moe(tmp_path):
    """An H800 MoE step's DeepEP kernels (about half the kernel time, nothing beside them) are collectives of their
    kind, and the fix is overlap, not DDP's buckets."""
    t = KinetoTrace()
    for n in range(3):
        with t.step(n):
            for _ in range(2):
                with t.op("aten::mm", dims=[[4096, 4096], [4096, 4096]], types=["c10::BFloat16"] * 2):
                    t.launch("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", 400)
                t.launch("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", 200)
                t.launch("void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(int4*, float*)", 200)
            with t.op("aten::item"):  # the loss read at the end of the step: host and device in step
                t.synchronize()
    path = _distributed(t, tmp_path / "moe.json")
    facts = trace_facts(path, device_type="cuda", steps=1)
    time = facts.kernels.time_by_category
    assert time["communication"] / sum(time.values()) == pytest.approx(0.5, abs=0.01)
    results = trace_results(path)
    comm = results.trials[0].metrics.distributed.communication
    assert {c.op for c in comm.collectives} == {"moe_dispatch", "moe_combine"} and NO_COLLECTIVES not in comm.notes
    assert comm.compute_s <= comm.step_s
    (f,) = [f for f in run_rules(results) if f.rule_id == "PS801"]
    assert "MoE" in f.title and "bucket_cap_mb" not in f.fix and "no_sync" not in f.fix


def test_a_kernel_launched_by_record_param_comms_is_communication_whatever_its_name(tmp_path):
    t = KinetoTrace()
    for n in range(2):
        with t.step(n):
            with t.op("aten::mm", dims=[[512, 512], [512, 512]]):
                t.launch("volta_sgemm_128x64_nn", 300)
            with t.op("record_param_comms"):
                t.launch("void my_custom_exchange_kernel<float>(float*)", 100)
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(t.to_json()))
    time = trace_facts(path, device_type="cuda", steps=1).kernels.time_by_category
    assert time["communication"] == pytest.approx(100e-6) and time["gemm"] == pytest.approx(300e-6)


def test_gpu_idle_inside_the_dataloaders_next_is_data_wait_not_sync(tmp_path):
    """The ResNet-50 shape of issue 34: a 175 ms step whose single-process loader takes ~69 ms after a short sync."""
    t = KinetoTrace()
    for n in range(3):
        with t.step(n):
            with t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
                t.work(69_000)
            for _ in range(20):
                with t.op("aten::conv2d"):
                    t.launch("void cudnn::cnn::conv2d_grouped_direct_kernel<float>", 5_000)
            with t.op("aten::item"):
                t.synchronize()
    path = tmp_path / "resnet.json"
    path.write_text(json.dumps(t.to_json()))
    facts = trace_facts(path, device_type="cuda", steps=1)
    assert facts.gpu.idle.data_wait_s == pytest.approx(0.069, rel=0.02) and facts.gpu.idle.sync_s < 0.001
    findings = run_rules(trace_results(path))
    assert findings[0].rule_id == "PS201"


def test_torchrecs_all_to_all_is_named_by_the_op_that_launched_its_sendrecv_kernels():
    """The 128-rank DLRM job's embedding all-to-all runs as NCCL SendRecv kernels; its c10d::alltoall_base_ op and
    nccl:all_to_all span say what it is, and the fix is torchrec's pipelining, not DDP's buckets or a pipeline schedule."""
    from tests.public_traces import public_folder

    results = trace_results(public_folder("trace_filter"))
    comm = results.trials[0].metrics.distributed.communication
    ops = {c.op: c for c in comm.collectives}
    assert set(ops) == {"all_to_all", "all_gather", "all_reduce"} and comm.collectives[0].op == "all_to_all"
    (f,) = [f for f in run_rules(results) if f.rule_id == "PS801"]
    assert "embedding all-to-all" in f.title and "TrainPipelineSparseDist" in f.fix and "bucket_cap_mb" not in f.fix


def test_a_trace_marked_only_by_the_users_record_function_is_split_at_its_marks_warm_up_dropped(tmp_path):
    """No ProfilerStep, no optimizer span: five `train_step` marks; the first iteration (one-time set-up, 10× the
    others) is left out and the notes say which steps were used."""
    t = KinetoTrace()
    for n in range(6):
        with t.annotation("train_step"):
            with t.annotation("forward"), t.op("aten::mm", dims=[[512, 512], [512, 512]]):
                t.launch("volta_sgemm_128x64_nn", 300)
            with t.op("aten::item"):
                t.synchronize()
            t.work(20_000 if n == 0 else 2_000)
    path = tmp_path / "marks.json"
    path.write_text(json.dumps(t.to_json()))
    facts = trace_facts(path, device_type="cuda", steps=1)
    assert facts.steps == 4 and facts.step_time_s < 0.003
    (found,) = [n for n in facts.notes if n.code == "steps_found_from"]
    assert "'train_step'" in found.params["source"] and "1 step(s) left out as one-time warm-up" in found.params["source"]


def test_the_kineto_resnet50_with_a_single_process_loader_is_loader_bound_on_a_v100():
    """Issue 34's ResNet-50: torch 1.9's spellings (Operator, Kernel, Runtime), a 175 ms step whose loader takes
    ~60 ms with the GPU idle; read, the loader is the top finding, and the V100's advice is fp16, not bf16."""
    path = public_trace("../kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace")
    results = trace_results(path)
    facts = results.trials[0].metrics.trace_facts
    assert facts.gpu.idle.data_wait_s > 10 * facts.gpu.idle.sync_s
    findings = run_rules(results)
    assert findings[0].rule_id == "PS201"
    (amp,) = [f for f in findings if f.rule_id == "PS101"]
    assert "fp16" in amp.title and not any("bf16" in f.title or "TF32" in f.title for f in findings)

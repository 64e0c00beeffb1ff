"""Typed trace facts in results.json: a lossless round trip, and older free-form dicts still read."""

from __future__ import annotations

import json

import pytest

from perfscope.results import GemmAlignment, Results, TraceFacts
from perfscope.results.migrate import NOTE_TRACE_FACTS
from perfscope.trace.facts import trace_facts
from tests.factories import make_results, make_trial
from tests.kineto import FIXTURES

# What perfscope wrote for a CUDA trial before the facts were typed (keys and value shapes as its
# trace/facts.py produced them).
OLD_CUDA_FACTS = {
    "device_type": "cuda", "steps": 3, "step_time_s": 0.0242, "data_wait_fraction": 0.10,
    "sync_events_per_step": {"aten::item": 1.0, "aten::_local_scalar_dense": 1.0, "cudaStreamSynchronize": 1.0},
    "sync_fraction": 0.68,
    "gemm_shapes": [{"op": "aten::addmm", "shape": [4096, 1024, 50257], "dtype": "c10::BFloat16", "count": 1.0, "time_s": 7.5e-06,
                     "misaligned": ["n"]}],
    "gpu_busy_fraction": 0.89, "gpu_idle_fraction": 0.11, "kernel_count_per_step": 261.0, "median_kernel_us": 4,
    "cpu_launch_time_per_step_s": 0.0016, "launch_bound": True,
    "idle_breakdown": {"data_wait": 0.0025, "sync": 8e-05, "launch_bound": 6.6e-05, "other": 0.0},
    "pageable_memcpy": {"count": 1.0, "bytes": 8388608.0, "time_s": 0.00035},
    "kernel_time_by_category": {"gemm": 0.0198, "elementwise": 0.00115},
    "top_kernels": [{"name": "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "time_s": 0.0156, "count": 16.0, "category": "other"}],
    "fp32_matmul_fraction": 0.0,
    "gemm_alignment": [{"shape": [4096, 1024, 50257], "padded": [4096, 1024, 50304], "dtype": "bf16", "time_s": 0.003,
                        "padded_time_s": 0.0025, "speedup_per_flop": 1.2}],
    "trace_bytes": 37939,
}
OLD_CPU_FACTS = {
    "device_type": "cpu", "steps": 3, "step_time_s": 0.012, "data_wait_fraction": 0.8, "sync_events_per_step": {}, "sync_fraction": 0.0,
    "gemm_shapes": [], "kernel_time_by_category": {"gemm": 0.001}, "top_kernels": [], "fp32_matmul_fraction": None,
    "kernel_count_per_step": 40.0, "median_kernel_us": 30.0, "tiny_op_time_fraction": 0.1, "launch_bound": False, "trace_bytes": 1000,
}


def _with_facts(facts: object) -> dict:
    """A results document whose facts are ``facts``, as an older (schema-3) perfscope wrote it."""
    data = make_results([make_trial()]).to_dict()
    data["schema_version"] = 3
    data["trials"][0]["metrics"]["trace_facts"] = facts
    return data


def test_trace_facts_round_trip_through_results_json(tmp_path):
    facts = trace_facts(FIXTURES / "h100_bf16_gpu_bound_item.json.gz", device_type="cuda", steps=3)
    facts.gemm_alignment = [GemmAlignment(shape=[4096, 1024, 50257], padded=[4096, 1024, 50304], dtype="bf16", time_s=3e-3,
                                          padded_time_s=2.5e-3, speedup_per_flop=1.2)]
    results = make_results([make_trial()])
    results.trials[0].metrics.trace_facts = facts
    loaded = Results.load(results.save(tmp_path / "results.json"))
    assert loaded == results
    assert isinstance(loaded.trials[0].metrics.trace_facts, TraceFacts)
    stored = json.loads((tmp_path / "results.json").read_text())["trials"][0]["metrics"]["trace_facts"]
    assert stored["gpu"]["idle"]["data_wait_s"] == pytest.approx(0.0025, rel=0.01)


def test_old_dict_shaped_cuda_facts_are_read_into_the_typed_model():
    facts = Results.from_dict(_with_facts(OLD_CUDA_FACTS)).trials[0].metrics.trace_facts
    assert facts.steps == 3 and facts.kernels.source == "kernels"
    assert facts.kernels.time_by_category == {"gemm": 0.0198, "elementwise": 0.00115}
    assert facts.kernels.top[0].name.startswith("nvjet_") and facts.kernels.fp32_gemm_fraction == 0.0
    assert facts.gpu.idle_fraction == 0.11 and facts.gpu.idle.host_s == 6.6e-05 and facts.gpu.idle.data_wait_s == 0.0025
    assert facts.launch.launch_bound is True and facts.launch.kernels_per_step == 261 and facts.launch.host_launch_s == 0.0016
    assert facts.sync.points_per_step == 1 and facts.sync.blocked_fraction == 0.68
    assert facts.pageable_memcpy.bytes == 8388608
    (shape,) = facts.gemm_shapes
    assert shape.time_source == "cpu op" and shape.misaligned == ["n"]  # its time was the host op's: said so
    assert facts.gemm_alignment[0].speedup_per_flop == 1.2
    assert facts.notes == [NOTE_TRACE_FACTS]


def test_old_dict_shaped_cpu_facts_are_read_into_the_typed_model():
    facts = Results.from_dict(_with_facts(OLD_CPU_FACTS)).trials[0].metrics.trace_facts
    assert facts.gpu is None and facts.pageable_memcpy is None and facts.kernels.source == "cpu ops"
    assert facts.launch.tiny_op_time_fraction == 0.1 and facts.data_wait_fraction == 0.8


def test_typed_facts_are_left_alone_and_a_missing_trace_stays_none():
    assert Results.from_dict(_with_facts(None)).trials[0].metrics.trace_facts is None
    typed = Results.from_dict(_with_facts(OLD_CUDA_FACTS)).to_dict()
    again = Results.from_dict(typed).to_dict()
    assert again == typed

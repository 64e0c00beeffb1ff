"""The data-parallel rules (PS801–PS804) on synthetic DistributedFacts: what they say, measured before estimated."""

from __future__ import annotations

import pytest

from perfscope.results import Finding, MicroBatchPoint, Results, Sweep
from perfscope.rules import partition_findings, run_rules
from tests.distributed_factories import make_distributed_results
from tests.factories import make_results
from tests.rules.test_rules import _with_knob

GiB = 2**30


def _only(results: Results, rule_id: str) -> list[Finding]:
    return [f for f in run_rules(results) if f.rule_id == rule_id]


# ------------------------------------------------------------------------- PS801 exposed communication


def test_exposed_communication_states_the_numbers_and_an_estimate_bounded_by_the_exposed_share():
    (f,) = _only(make_distributed_results(exposed_share=0.3), "PS801")
    assert f.gain is None and f.estimated_gain == pytest.approx(1 / 0.7)
    assert "30.0 ms exposed (30% of the step" in f.evidence[0] and "33% of it overlapped" in f.evidence[0]
    assert any("all_reduce" in e and "12.0 GB/s vs 40.0 GB/s alone in the micro-benchmark (30% of it)" in e for e in f.evidence)
    assert any("wait more than they move bytes" in e for e in f.evidence)
    assert f.upper_bound and "30.0 ms of the 100.0 ms traced step" in f.estimate_bound
    assert "model.no_sync()" in f.fix and "bucket_cap_mb" in f.fix and "bf16_compress_hook" in f.fix
    assert f.addresses == ["communication"]


def test_gradient_compression_is_fp16_on_a_device_without_bf16():
    results = make_distributed_results(exposed_share=0.3)
    results.environment.compute_capability = "7.0"  # a V100
    (f,) = _only(results, "PS801")
    assert "fp16_compress_hook" in f.fix and "bf16" not in f.fix


def test_a_full_link_is_told_apart_from_waiting_collectives():
    (f,) = _only(make_distributed_results(exposed_share=0.3, bus_gbps=36.0), "PS801")
    assert any("the link is the limit" in e for e in f.evidence) and not any("wait more" in e for e in f.evidence)


def test_exposed_communication_reports_measured_knobs_first_and_drops_the_estimate_when_one_won():
    results = make_distributed_results(exposed_share=0.3)
    _with_knob(results, "no_sync_accumulation", 1.25)
    _with_knob(results, "ddp_bucket_cap", 1.01, significant=False)
    findings = run_rules(results)
    ranked, did_not_help = partition_findings(findings)
    mine = [f for f in ranked if f.rule_id == "PS801"]
    assert [(f.trial, f.gain.ratio) for f in mine] == [("no_sync_accumulation", 1.25)] and mine[0].estimated_gain is None
    assert [f.trial for f in did_not_help if f.rule_id == "PS801"] == ["ddp_bucket_cap"]
    assert sorted(f.trial for f in findings if f.trial) == ["ddp_bucket_cap", "no_sync_accumulation"]  # each once, not PS100 too


def test_fixes_measured_as_no_help_leave_the_estimate_to_the_others():
    results = make_distributed_results(exposed_share=0.3)
    _with_knob(results, "ddp_bucket_cap", 0.97)
    estimate = next(f for f in _only(results, "PS801") if f.trial is None)
    assert estimate.estimated_gain is not None and "bucket_cap_mb" not in estimate.fix and "no_sync" in estimate.fix


def test_all_fixes_measured_without_a_win_leave_a_diagnosis_without_an_estimate():
    results = make_distributed_results(exposed_share=0.3)
    for knob in ("no_sync_accumulation", "ddp_bucket_cap", "grad_compression"):
        _with_knob(results, knob, 0.99, significant=False)
    diagnosis = next(f for f in _only(results, "PS801") if f.trial is None)
    assert diagnosis.estimated_gain is None and diagnosis.estimate_method is None and "did not help" in diagnosis.title


def test_exposed_communication_never_advises_what_the_loop_already_does():
    results = make_distributed_results(exposed_share=0.3)
    results.trials[0].config = results.trials[0].config.replace(no_sync=True, comm_hook="bf16")
    (f,) = _only(results, "PS801")
    assert "no_sync" not in f.fix and "compress" not in f.fix and "bucket_cap_mb" in f.fix
    fsdp = make_distributed_results(exposed_share=0.3, data_parallel="fsdp")
    (f,) = _only(fsdp, "PS801")
    assert "set_requires_gradient_sync" in f.fix and "bucket_cap_mb" not in f.fix and "compress" not in f.fix


def test_distributed_rules_stay_silent_on_one_process():
    results = make_results()
    results.environment.torch_version = "2.13.0"
    assert not {f.rule_id for f in run_rules(results)} & {"PS801", "PS802", "PS803", "PS804"}


# ------------------------------------------------------------------------- PS802 stragglers


def test_straggler_finding_names_the_rank_how_much_slower_and_whether_it_is_always_the_same():
    (f,) = _only(make_distributed_results(straggler=2, slower_by=0.3, slowest_share=0.95), "PS802")
    assert f.title.startswith("Rank 2 straggles") and "gc.freeze()" in f.fix and "gc.collect()" in f.fix
    assert "rank 2 (local rank 2 on node-0) computes 30% slower" in f.evidence[0]
    assert "95% of the steps: the same rank every step" in f.evidence[1]
    assert f.estimated_gain is not None and f.estimated_gain > 1 and "rank 2's excess compute" in f.estimate_bound
    (chance,) = _only(make_distributed_results(straggler=1, slowest_share=0.3), "PS802")
    assert "about chance (25%)" in chance.evidence[1]


@pytest.mark.parametrize(("cause", "device", "words"), [
    ("gc", "cuda", "gc.disable()"),
    ("data", "cuda", "num_workers="),
    ("host contention", "cuda", "--numa-binding node"),
    ("compute", "cuda", "nvidia-smi -q -d CLOCK,TEMPERATURE"),
    ("compute", "cpu", "/proc/cpuinfo"),
    ("unknown", "cuda", "trace/rank3.json.gz"),
])
def test_each_straggler_cause_gets_its_own_fix(cause, device, words):
    (f,) = _only(make_distributed_results(device, straggler=3, cause=cause), "PS802")
    assert words in f.fix, f.fix


# ------------------------------------------------------------------------- PS803 memory-bound data parallelism


def _memory_bound(**kw) -> Results:
    return make_distributed_results(peak_bytes=74 * GiB, state_bytes=(8 * GiB, 8 * GiB, 32 * GiB), **kw)


def test_memory_bound_ddp_suggests_the_lightest_stage_that_doubles_the_micro_batch():
    # DDP holds 48 GiB per rank; 26 GiB of activations for 8 samples. ZeRO-1 (24 GiB) fits 14, ZeRO-2 (18 GiB) 16.
    (f,) = _only(_memory_bound(), "PS803")
    assert f.title.endswith("shard with ZeRO-2") and "reshard_after_forward=False" in f.fix
    assert any("ZeRO-2 (FSDP2, no reshard) frees 30.00 GiB per rank; about micro-batch 16 would fit" in e for e in f.evidence)
    assert any("DDP 48.00 GiB (measured 48.00 GiB); ZeRO-1 (ZeroRedundancyOptimizer) 24.00 GiB" in e for e in f.evidence)
    assert f.addresses == [] and f.estimated_gain is None and "80.00 GiB" in f.estimate_bound


def test_memory_bound_fires_on_an_oom_in_the_micro_batch_search_and_not_under_fsdp():
    results = make_distributed_results(peak_bytes=20 * GiB, state_bytes=(8 * GiB, 8 * GiB, 32 * GiB))
    assert _only(results, "PS803") == []
    results.sweep = Sweep(baseline_trial="baseline", micro_batch=[MicroBatchPoint(micro_batch_size=16, grad_accum_steps=1, trial="mb16", status="oom")])
    (f,) = _only(results, "PS803")
    assert any("ran out of memory at micro-batch 16" in e for e in f.evidence)
    assert _only(_memory_bound(data_parallel="fsdp"), "PS803") == []


def test_memory_bound_attaches_the_measured_sharding_knobs():
    results = _with_knob(_with_knob(_memory_bound(), "zero1", 1.3), "fsdp2", 0.9)
    ranked, did_not_help = partition_findings(run_rules(results))
    assert [(f.trial, f.gain.ratio) for f in ranked if f.rule_id == "PS803"] == [("zero1", 1.3)]
    (slow,) = [f for f in did_not_help if f.rule_id == "PS803"]
    assert slow.trial == "fsdp2" and "communication" in slow.why_not_here


# ------------------------------------------------------------------------- PS804 NUMA binding


def test_numa_binding_uses_torchrun_on_new_torch_and_numactl_elsewhere():
    (f,) = _only(make_distributed_results(numa_nodes=2), "PS804")
    assert "--numa-binding node" in f.fix and "2 NUMA nodes" in f.evidence[0]
    old = make_distributed_results(numa_nodes=2)
    old.environment.torch_version = "2.8.0"
    (f,) = _only(old, "PS804")
    assert "numactl --cpunodebind" in f.fix and "--numa-binding" not in f.fix.split("\n", 1)[1]
    (f,) = _only(make_distributed_results("cpu", numa_nodes=4), "PS804")
    assert "% 4" in f.fix and "--no-python ./bind.sh" in f.fix
    assert _only(make_distributed_results(numa_nodes=1), "PS804") == []

"""Each rule fires on a fixture that shows its problem and stays silent on one that does not."""

from __future__ import annotations

import copy
import dataclasses
import re
import warnings
from collections.abc import Callable

import pytest

from perfscope.results import (
    DatasetProfile,
    Finding,
    Gain,
    GemmAlignment,
    GemmShape,
    KnobOutcome,
    MemoryBreakdown,
    PageableCopies,
    ProfiledFunction,
    Results,
    Sweep,
    SyncFacts,
    TraceFacts,
    Utilization,
)
from perfscope.results.messages import msg
from perfscope.rules import all_rules, partition_findings, run_rules
from perfscope.rules.engine import Rule, RuleContext, run
from perfscope.stats import summarize
from tests.distributed_factories import make_distributed_results, make_pipeline_results, make_tensor_parallel_results
from tests.factories import make_results, make_trace_facts, make_trial

GiB = 2**30


def _results(device: str = "cuda", **config) -> Results:
    trial = make_trial(median_s=0.1)
    trial.config = dataclasses.replace(trial.config, **{"precision": "fp32", "num_workers": 0, "pin_memory": False, **config})
    results = make_results([trial], device_type=device)
    results.environment.compute_capability = "9.0" if device == "cuda" else None
    results.environment.datasheet_peaks_tflops = {"fp32": 66.9, "bf16": 989.4} if device == "cuda" else {}
    trial.metrics.trace_facts = None  # no trace unless a case gives one
    return results


def _gain(ratio: float, significant: bool = True) -> Gain:
    verdict = ("faster" if ratio > 1 else "slower") if significant else "undecided"
    return Gain(ratio=ratio, low=ratio * 0.97, high=ratio * 1.03, confidence=0.99, verdict=verdict)


def _with_knob(results: Results, knob: str, ratio: float, significant: bool = True, status: str = "measured") -> Results:
    results.sweep = results.sweep or Sweep(baseline_trial="baseline")
    results.sweep.knobs.append(KnobOutcome(knob=knob, title=knob, status=status, trial=knob, gain=_gain(ratio, significant),
                                           code_change=f"+{knob}", changes_semantics=[msg("numerics", change=msg("bf16_matmuls"))] if knob.startswith("amp") else []))
    return results


def _quiet_facts() -> TraceFacts:
    """A GPU-bound step's trace in which no trace-based rule finds anything."""
    return make_trace_facts(sync=SyncFacts(points_per_step=0, blocked_fraction=0.0), pageable_memcpy=None)


def _facts(results: Results, *, kernels: dict | None = None, launch: dict | None = None, sync: dict | None = None, **fields) -> Results:
    """Give the baseline a trace: the quiet one, with these families' fields and these top-level fields changed."""
    facts = results.trials[0].metrics.trace_facts or _quiet_facts()
    facts.kernels = dataclasses.replace(facts.kernels, **(kernels or {}))
    facts.launch = dataclasses.replace(facts.launch, **(launch or {}))
    facts.sync = dataclasses.replace(facts.sync, **(sync or {}))
    for key, value in fields.items():
        setattr(facts, key, value)
    results.trials[0].metrics.trace_facts = facts
    return results


def _metrics(results: Results, **values) -> Results:
    for k, v in values.items():
        setattr(results.trials[0].metrics, k, v)
    return results


def _util(**kw) -> Utilization:
    return Utilization(**kw)


def _gemm(shape: list[int], misaligned: list[str], time_s: float) -> GemmShape:
    return GemmShape(op="aten::mm", shape=shape, dtype="c10::BFloat16", count=1, time_s=time_s, time_source="kernels", misaligned=misaligned)


CASES: dict[str, tuple[Callable[[], Results], Callable[[], Results]]] = {
    "PS100": (lambda: _with_knob(_results(), "fused_optimizer", 1.2), lambda: _results()),
    "PS101": (lambda: _facts(_results(), kernels={"fp32_gemm_fraction": 0.9}), lambda: _results(precision="bf16")),
    "PS102": (lambda: _results(), lambda: _results(tf32=True)),
    "PS201": (lambda: _metrics(_results(), data_wait_share=0.4), lambda: _metrics(_results(), data_wait_share=0.02)),
    "PS202": (lambda: _facts(_results(), pageable_memcpy=PageableCopies(count=2, bytes=4 * 2**20, time_s=0.001)),
              lambda: _facts(_results(pin_memory=True), pageable_memcpy=PageableCopies(count=2, bytes=1, time_s=0.001))),
    "PS301": (lambda: _facts(_results(), launch={"launch_bound": True, "kernels_per_step": 900, "median_kernel_us": 4.0, "starved_fraction": 0.6}),
              lambda: _facts(_results(), launch={"launch_bound": False, "kernels_per_step": 90, "median_kernel_us": 400.0})),
    "PS302": (lambda: _facts(_results(), sync={"points_per_step": 3, "events_per_step": {"aten::item": 3, "cudaStreamSynchronize": 3},
                                                "blocked_fraction": 0.08}),
              lambda: _facts(_results(), sync={"points_per_step": 0, "events_per_step": {}, "blocked_fraction": 0.0})),
    "PS303": (lambda: _facts(_results(), kernels={"time_by_category": {"gemm": 0.04, "elementwise": 0.05}}),
              lambda: _facts(_results(), kernels={"time_by_category": {"gemm": 0.09, "elementwise": 0.01}})),
    "PS401": (lambda: _facts(_results(), step_time_s=0.1, gemm_shapes=[_gemm([8192, 768, 50257], ["n"], 0.02)],
                             gemm_alignment=[GemmAlignment(shape=[8192, 768, 50257], padded=[8192, 768, 50304], dtype="fp32", time_s=3e-3,
                                                           padded_time_s=2e-3, speedup_per_flop=1.5)]),
              lambda: _facts(_results(), step_time_s=0.1, gemm_shapes=[_gemm([8192, 768, 50304], [], 0.02)])),
    "PS501": (lambda: _metrics(_results(), peak_memory_bytes=10 * GiB), lambda: _metrics(_results(), peak_memory_bytes=60 * GiB)),
    "PS502": (lambda: _metrics(_results(), peak_memory_bytes=74 * GiB, peak_reserved_bytes=77 * GiB),
              lambda: _metrics(_results(), peak_memory_bytes=60 * GiB, peak_reserved_bytes=62 * GiB)),
    "PS503": (lambda: _metrics(_results(), peak_memory_bytes=20 * GiB,
                               memory_breakdown=MemoryBreakdown(parameters=4 * GiB, gradients=4 * GiB, optimizer_state=8 * GiB, activations_and_temporaries=4 * GiB)),
              lambda: _metrics(_results(), peak_memory_bytes=60 * GiB,
                               memory_breakdown=MemoryBreakdown(parameters=1 * GiB, gradients=1 * GiB, optimizer_state=2 * GiB, activations_and_temporaries=56 * GiB))),
    "PS504": (lambda: _metrics(_results(), peak_memory_bytes=30 * GiB, peak_reserved_bytes=50 * GiB),
              lambda: _metrics(_results(), peak_memory_bytes=30 * GiB, peak_reserved_bytes=32 * GiB)),
    "PS601": (lambda: _with_knob(_results(), "amp_fp16", 1.9, status="rejected"), lambda: _with_knob(_results(), "amp_bf16", 1.5)),
    "PS602": (lambda: _gc_tail([0.1] * 20 + [0.3], [0.0] * 20 + [0.15]),
              lambda: _gc_tail([0.1] * 21, [0.0] * 21)),
    "PS701": (lambda: _metrics(_results(), utilization=_util(cpu_percent=summarize([97.0, 99.0, 98.0]))),
              lambda: _metrics(_results(device="cpu"), utilization=_util(cpu_percent=summarize([99.0, 99.0])))),
    "PS702": (lambda: _metrics(_results(), utilization=_util(throttle_reasons_seen=["HW thermal slowdown"], sm_clock_mhz=summarize([1980, 1400, 1980]))),
              lambda: _metrics(_results(), utilization=_util(throttle_reasons_seen=[], sm_clock_mhz=summarize([1980, 1975, 1980])))),
    # data-parallel runs (tests/rules/test_distributed_rules.py has the details)
    "PS801": (lambda: make_distributed_results(exposed_share=0.3), lambda: make_distributed_results(exposed_share=0.05)),
    "PS802": (lambda: make_distributed_results(straggler=2), lambda: make_distributed_results()),
    "PS803": (lambda: make_distributed_results(peak_bytes=74 * GiB, state_bytes=(8 * GiB, 8 * GiB, 32 * GiB)),
              lambda: make_distributed_results(peak_bytes=40 * GiB, state_bytes=(8 * GiB, 8 * GiB, 32 * GiB))),
    "PS804": (lambda: make_distributed_results(numa_nodes=2), lambda: make_distributed_results(numa_nodes=2, numa_binding="node")),
    # model-parallel runs (tests/rules/test_layout_rules.py has the details)
    "PS805": (lambda: make_distributed_results(state_bytes=(100 * GiB, 100 * GiB, 200 * GiB)),
              lambda: make_distributed_results(state_bytes=(8 * GiB, 8 * GiB, 32 * GiB))),
    "PS806": (lambda: make_tensor_parallel_results(exposed_share=0.3), lambda: make_tensor_parallel_results(exposed_share=0.05)),
    "PS807": (lambda: make_pipeline_results(microbatches=2, bubble=0.4), lambda: make_pipeline_results(microbatches=8, bubble=0.12)),
}


def test_every_registered_rule_has_fixtures():
    assert sorted(CASES) == sorted(r.id for r in all_rules())


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_on_the_problem(rule_id):
    rule = next(r for r in all_rules() if r.id == rule_id)
    findings = run(CASES[rule_id][0](), [rule])
    assert findings and all(f.rule_id == rule_id for f in findings)
    for f in findings:
        assert f.title and f.evidence and f.severity in ("high", "medium", "low", "info")


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_stays_silent_without_the_problem(rule_id):
    rule = next(r for r in all_rules() if r.id == rule_id)
    assert [f for f in run(CASES[rule_id][1](), [rule]) if f.rule_id == rule_id] == []


def test_measured_before_estimated_before_diagnosis_and_not_significant_apart():
    results = _metrics(_results(tf32=True), data_wait_share=0.3)  # estimated (PS201)
    _with_knob(results, "amp_bf16", 1.8)  # measured, explained by PS101
    _with_knob(results, "gc_freeze", 1.01, significant=False)  # measured, not significant
    _facts(results, sync={"points_per_step": 2, "events_per_step": {"aten::item": 2}, "blocked_fraction": 0.01})  # diagnosis only
    findings = run_rules(results)
    ranked, not_significant = partition_findings(findings)
    assert ranked[0].rule_id == "PS101" and ranked[0].gain.ratio == 1.8
    assert ranked[1].rule_id == "PS201" and ranked[1].estimated_gain is not None and ranked[1].estimate_method
    assert [f.trial for f in not_significant] == ["gc_freeze"]
    assert msg("numerics", change=msg("bf16_matmuls")) in ranked[0].caveats  # the knob's semantics travel with the finding


def test_each_measured_knob_is_reported_exactly_once():
    results = _with_knob(_with_knob(_results(), "amp_bf16", 1.8), "fused_optimizer", 1.1)
    trials = [f.trial for f in run_rules(results) if f.trial]
    assert sorted(trials) == ["amp_bf16", "fused_optimizer"]


def test_never_advise_what_is_already_on():
    results = _facts(_results(precision="bf16", tf32=True, compile="default"), kernels={"time_by_category": {"elementwise": 1.0}})
    ids = {f.rule_id for f in run_rules(results)}
    assert not ids & {"PS101", "PS102", "PS303"}


def test_one_item_is_one_sync_point_named_by_its_site():
    # .item() on a device tensor: aten::item > aten::_local_scalar_dense around one cudaStreamSynchronize
    results = _facts(_results(), sync={"points_per_step": 1, "events_per_step": {"cudaStreamSynchronize": 1}, "blocked_fraction": 0.3,
                                       "sites": {"aten::item > aten::_local_scalar_dense (DtoH copy) at train.py(42): step": 1}})
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS302"]
    assert finding.evidence[0] == ("1 wait on the device per step: "
                                   "aten::item > aten::_local_scalar_dense (DtoH copy) at train.py(42): step ×1")
    assert "loss.item()" in finding.fix


def test_a_wait_that_costs_nothing_is_not_a_finding():
    """A sync whose queue was already empty: no GPU idle after it, so no code change is worth it."""
    results = _facts(_results(), sync={"points_per_step": 3, "events_per_step": {"cudaStreamSynchronize": 3}, "blocked_fraction": 0.2,
                                       "sites": {"aten::to > aten::copy_ (DtoH copy)": 3}, "gpu_idle_after_s": 0.0})
    assert [f for f in run_rules(results) if f.rule_id == "PS302"] == []


def test_a_blocking_batch_copy_is_fixed_by_pinned_memory_not_by_reading_less():
    results = _facts(_results(), sync={"points_per_step": 1, "events_per_step": {"cudaStreamSynchronize": 1}, "blocked_fraction": 0.1,
                                       "sites": {"aten::to > aten::copy_ (HtoD copy)": 1}})
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS302"]
    assert "non_blocking=True" in finding.fix and "pin_memory=True" in finding.fix


def _clocks(reasons: list[str], clocks: list[float], max_mhz: float | None = 1980.0) -> Results:
    return _metrics(_results(), utilization=_util(throttle_reasons_seen=reasons, sm_clock_mhz=summarize(clocks), sm_clock_max_mhz=max_mhz))


def test_sw_power_cap_is_information_unless_clocks_fall_far_below_the_maximum():
    # A loaded H100 at its power limit: the driver trims clocks a little (and they vary): not throttling.
    routine = [f for f in run_rules(_clocks(["SW power cap"], [1980, 1650, 1755, 1980, 1700])) if f.rule_id == "PS702"]
    assert [f.severity for f in routine] == ["info"] and "throttled" not in routine[0].title
    # Power-capped far below the maximum clock: a real slowdown.
    far = [f for f in run_rules(_clocks(["SW power cap"], [1100, 1150, 1200])) if f.rule_id == "PS702"]
    assert [f.severity for f in far] == ["medium"] and far[0].title == "GPU clocks throttled"
    # Thermal slowdown and the power brake are problems whatever the clocks say.
    for reason in ("HW thermal slowdown", "HW power brake", "HW slowdown"):
        (f,) = [f for f in run_rules(_clocks([reason, "SW power cap"], [1980, 1975, 1980])) if f.rule_id == "PS702"]
        assert f.severity == "medium"


def test_tf32_the_user_set_in_their_file_is_not_advised():
    # The baseline config leaves TF32 alone (tf32=None); the trial recorded the user's own setting.
    results = _metrics(_results(tf32=None), matmul_tf32=True)
    assert "PS102" not in {f.rule_id for f in run_rules(results)}
    assert "PS102" in {f.rule_id for f in run_rules(_metrics(_results(tf32=None), matmul_tf32=False))}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_fix_texts_are_written_for_the_runs_device(rule_id, device):
    """No `.cuda()` / autocast("cuda") in a CPU run's advice, no CPU-only code in a GPU run's."""
    rule = next(r for r in all_rules() if r.id == rule_id)
    results = CASES[rule_id][0]()
    results.environment.device_type = device
    for f in run(results, [rule]):
        if device == "cpu":
            assert "cuda" not in f.fix.lower(), f.fix
        else:
            assert '"cpu"' not in f.fix and not re.search(r"MyNet\(\)(?!\.cuda\(\))", f.fix), f.fix
            if "autocast" in f.fix:
                assert 'device_type="cuda"' in f.fix


@pytest.mark.parametrize("probed", ["NEW_ONLY", "MIXED_CHECK"])
def test_tf32_fix_uses_the_api_of_the_runs_torch(monkeypatch, probed):
    import torch

    from perfscope import tf32_api

    monkeypatch.setattr(tf32_api, "probe_installed_torch", lambda: getattr(tf32_api, probed))
    results = _results()
    results.environment.torch_version = torch.__version__  # this torch: its probe decides
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS102"]
    if probed == "NEW_ONLY":
        assert finding.fix == '+torch.backends.cuda.matmul.fp32_precision = "tf32"'
    else:  # torch 2.9-2.13: the new setter alone breaks torch.compile, the legacy one sets both (pytorch#166387)
        assert finding.fix.startswith("+torch.backends.cuda.matmul.allow_tf32 = True   # also sets fp32_precision")
    results.environment.torch_version = "2.11.0+cu128"  # another torch 2.9-2.11: the mixed check, by version
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS102"]
    assert finding.fix.startswith("+torch.backends.cuda.matmul.allow_tf32 = True   #") and "166387" in finding.fix
    results.environment.torch_version = "2.4.1+cu121"
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS102"]
    assert finding.fix == "+torch.backends.cuda.matmul.allow_tf32 = True"


def test_a_crashing_rule_is_a_warning_not_a_crash():
    class Broken(Rule):
        """Always fails."""

        id, name = "PS999", "broken"

        def check(self, ctx: RuleContext):
            raise ZeroDivisionError("boom")

    results = _metrics(_results(), data_wait_share=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        findings = run(results, [Broken(), *all_rules()])
    assert any("PS999" in str(w.message) for w in caught)
    assert any(f.rule_id == "PS201" for f in findings)


def test_no_successful_trial_means_no_findings():
    results = make_results([make_trial(status="oom")])
    assert run_rules(copy.deepcopy(results)) == []


def test_rules_cli(capsys):
    from perfscope.cli import main

    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert all(r.id in out for r in all_rules())
    assert main(["rules", "PS401"]) == 0
    page = capsys.readouterr().out
    assert "Anti-pattern" in page  # the docstring ...
    ps401 = next(r for r in all_rules() if r.id == "PS401")
    assert f"Threshold: {ps401.doc.threshold}" in page and f"Gain: {ps401.doc.gain}" in page  # ... and the catalogue entry
    assert main(["rules", "PS000"]) == 2


def test_every_rule_documents_itself_and_the_page_is_generated_from_the_rules(tmp_path):
    """docs/rules.md's catalogue is a rendering of the rules (perfscope.rules.docs): stale or hand-edited, it fails."""
    from pathlib import Path

    from perfscope.rules.docs import BEGIN, main, regenerate

    for rule in all_rules():
        assert all(getattr(rule.doc, key).strip() for key in ("detects", "threshold", "evidence", "fix", "gain", "guard")), rule.id
        assert (type(rule).__doc__ or "").strip(), rule.id
    page = Path(__file__).parents[2] / "docs" / "rules.md"
    assert main(["--check", str(page)]) == 0
    text = page.read_text()
    assert all(f"| {r.id} {r.name} |" in text for r in all_rules())
    edited = tmp_path / "rules.md"
    edited.write_text(text.replace(f"| {all_rules()[1].doc.detects} |", "| hand-edited |", 1))
    assert main(["--check", str(edited)]) == 1  # a hand edit is caught ...
    assert regenerate(edited.read_text(), all_rules()) == text  # ... and regeneration restores the page
    with pytest.raises(ValueError, match="no generated part"):
        regenerate(text.replace(BEGIN, ""), all_rules())


# ------------------------------------------------------------------------- measured beats believed


def _cpu_run_like_the_quick_start() -> Results:
    """The quick start on a 2-core CPU: bf16 measured 16× slower, compile undecided, micro-batch a win."""
    results = _facts(_results(device="cpu"), kernels={"time_by_category": {"gemm": 0.06, "elementwise": 0.03}})
    results.environment.cpu_cores_physical, results.environment.cpu_cores_usable = 2, 2.0
    _with_knob(results, "amp_bf16", 0.06)
    _with_knob(results, "compile", 0.99, significant=False)
    _with_knob(results, "micro_batch", 1.37)
    return results


def test_a_fix_measured_as_slower_or_undecided_is_never_ranked():
    ranked, did_not_help = partition_findings(run_rules(_cpu_run_like_the_quick_start()))
    assert {f.rule_id for f in ranked}.isdisjoint({"PS101", "PS303"})
    assert all(f.gain is None or f.gain.faster for f in ranked)
    by_rule = {f.rule_id: f for f in did_not_help}
    assert by_rule["PS101"].gain.ratio == 0.06 and by_rule["PS303"].gain.verdict == "undecided"
    assert "tensor cores" in by_rule["PS101"].why_not_here and "CPU" in by_rule["PS101"].why_not_here
    assert by_rule["PS303"].why_not_here
    assert ranked[0].trial == "micro_batch" and ranked[0].gain.ratio == 1.37


def test_a_measured_fix_shows_no_estimate():
    results = _metrics(_results(), data_wait_share=0.5)
    _with_knob(results, "dataloader_workers", 1.0, significant=False)
    diagnosis, finding = [f for f in run_rules(results) if f.rule_id == "PS201"]
    assert finding.gain is not None and finding.estimated_gain is None and finding.estimate_method is None
    assert finding.measured_no_help and finding.why_not_here
    # The diagnosis stands, with the Dataset's own cost as what is left to change.
    assert diagnosis.gain is None and "Dataset" in diagnosis.title and "__getitem__" in diagnosis.fix


# ------------------------------------------------------------------------- data loader, machine-aware


def _data_bound(wait: float, cores: float | None, device: str = "cpu", profile: DatasetProfile | None = None) -> Finding:
    results = _metrics(_results(device=device), data_wait_share=wait, dataset_profile=profile)
    results.environment.cpu_cores_usable = cores
    if cores is None:
        results.environment.cpu_cores_physical = results.environment.cpu_cores_logical = None
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS201"]
    return finding


def _profile(getitem_ms: float, one_thread_ms: float, collate_ms: float = 0.0, batch: int = 8, threads: int = 2) -> DatasetProfile:
    return DatasetProfile(kind="map", samples=64, batch_size=batch, getitem_s=getitem_ms / 1e3, threads=threads,
                          getitem_one_thread_s=one_thread_ms / 1e3, collate_s=collate_ms / 1e3, profiled_s=1.0, method="test",
                          top=[ProfiledFunction(function="{built-in method torch._C._fft.fft_irfft2}", calls=384, self_s=0.5,
                                                cumulative_s=0.5, self_share=0.45),
                               ProfiledFunction(function="examples/cpu_heavy_dataset.py:23(__getitem__)", calls=64, self_s=0.1,
                                                cumulative_s=1.0, self_share=0.11)])


def test_data_loader_estimate_is_bounded_by_the_cores_the_workers_share_with_the_compute():
    # 97% data wait on a 2-core CPU: the training process's 2 torch threads and the workers share 2 cores. One worker
    # delivers a batch every 97 ms, all of it 1.5× slower (3 threads on 2 cores); two deliver every 48.5 ms, 2× slower:
    # about today's step. Not 1 / (1 − 0.97) = 33×: nothing to promise, and the finding says why.
    two = _data_bound(0.97, 2.0)
    assert two.estimated_gain is None and "too slow for this machine" in two.title
    (gap,) = [e for e in two.evidence if "cannot close the gap" in e]
    assert "2 training thread(s) and 2 worker(s) on 2 core(s) everything runs 2.00× slower" in gap
    assert any("per sample" in e for e in two.evidence)
    assert "num_workers" not in two.fix and "__getitem__" in two.fix  # workers are not the fix here: the Dataset's cost is
    # A GPU run with plenty of cores: the workers hide the loading, and the bound is the full overlap.
    many = _data_bound(0.4, 16.0, device="cuda")
    assert many.estimated_gain == pytest.approx(1 / 0.6) and not any("cannot close" in e for e in many.evidence)
    assert "add DataLoader workers" in many.title and "1 worker(s)" in many.estimate_method
    assert "16 usable core(s)" in many.estimate_bound and "one core to launch work" in many.estimate_bound


def test_data_loader_estimate_uses_the_profiled_one_thread_cost_a_worker_pays():
    # The main process built a batch in 60 ms on 2 threads; on one thread (a worker) it takes 120 ms. 2 cores,
    # compute 40 ms on 2 threads: 1 worker → 1.5 × 120 ms, 2 workers → 2 × 60 ms: both slower than today's 100 ms.
    profile = _profile(getitem_ms=7.5, one_thread_ms=15.0)  # × 8 samples = 60 ms / 120 ms
    finding = _data_bound(0.6, 2.0, profile=profile)
    assert finding.estimated_gain is None and "too slow for this machine" in finding.title
    assert any("15.0 ms on one thread" in e and "a batch of 8 costs 60.0 ms (120.0 ms in a worker)" in e for e in finding.evidence)
    assert any("torch._C._fft.fft_irfft2 45%" in e and "__getitem__ (examples/cpu_heavy_dataset.py:23) 11%" in e for e in finding.evidence)
    # The same Dataset without intra-op parallelism (60 ms on one thread too): 2 workers, 2 × max(40, 30) = 80 ms.
    cheap = _data_bound(0.6, 2.0, profile=_profile(getitem_ms=7.5, one_thread_ms=7.5))
    assert cheap.estimated_gain == pytest.approx(0.1 / 0.08, rel=0.01)
    assert "profiled" in cheap.estimate_method and "2 worker(s)" in cheap.estimate_method and "num_workers=2" in cheap.fix
    assert "torch._C._fft.fft_irfft2 (45%)" in finding.fix  # the too-slow Dataset: its hottest functions
    assert "shared by the training process's 2 torch thread(s) and 2 worker(s) (×2.00" in cheap.estimate_bound


def test_workers_measured_as_no_help_point_at_the_profiled_hot_functions():
    results = _metrics(_results(device="cpu"), data_wait_share=0.6, dataset_profile=_profile(7.5, 15.0))
    _with_knob(results, "dataloader_workers", 0.8)
    diagnosis, measured = [f for f in run_rules(results) if f.rule_id == "PS201"]
    assert measured.measured_no_help and diagnosis.gain is None and diagnosis.estimated_gain is None
    assert "torch._C._fft.fft_irfft2 (45%)" in diagnosis.fix and "cProfile" not in diagnosis.fix
    assert any("where __getitem__ and collate spend their time" in e for e in diagnosis.evidence)


def test_data_loader_with_no_free_core_promises_nothing():
    one = _data_bound(0.6, 1.0)
    assert one.estimated_gain is None and "too slow for this machine" in one.title


def test_data_loader_without_recorded_cores_says_its_bound_ignores_them():
    unknown = _data_bound(0.5, None)
    assert unknown.estimated_gain == pytest.approx(2.0) and "did not record" in unknown.estimate_method
    assert "the compute" in unknown.estimate_bound


def test_data_loader_fix_leaves_out_options_measured_as_no_better():
    results = _metrics(_results(device="cpu"), data_wait_share=0.5)
    results.environment.cpu_cores_usable = 8.0
    _with_knob(results, "prefetch_factor", 1 / 6.19)
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS201"]
    assert "prefetch_factor" not in finding.fix and "persistent_workers=True" in finding.fix


def test_usable_cores_respect_the_cgroup_quota(tmp_path):
    from perfscope.measure.cores import cgroup_quota_cores

    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_quota_cores(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota_cores(tmp_path) is None


# ------------------------------------------------------------------------- optimizer state: measured or estimated


def _optimizer_bound(**metrics) -> Results:
    """An AdamW step whose optimizer state is 40% of the peak (PS503's problem)."""
    return _metrics(_results(), peak_memory_bytes=20 * GiB, **metrics,
                    memory_breakdown=MemoryBreakdown(parameters=4 * GiB, gradients=4 * GiB, optimizer_state=8 * GiB,
                                                     activations_and_temporaries=4 * GiB))


def _lean_optimizer_run(results: Results, knob: str = "adafactor", *, ratio: float = 1.3, status: str = "measured",
                        micro: int = 48, optimizer: str = "adafactor") -> Results:
    """The sweep measured a lean optimizer at the micro-batch it unlocked: its run, and its outcome."""
    name = f"{knob}-mb{micro}"
    trial = make_trial(name, batch=micro)
    trial.config = dataclasses.replace(trial.config, optimizer=optimizer)
    trial.metrics.optimizer = "torch.optim.Adafactor" if optimizer == "adafactor" else "torchao.optim.adam.AdamW8bit"
    trial.metrics.memory_breakdown = MemoryBreakdown(parameters=4 * GiB, gradients=4 * GiB, optimizer_state=GiB // 100,
                                                     activations_and_temporaries=10 * GiB)
    results.trials.append(trial)
    results.sweep = results.sweep or Sweep(baseline_trial="baseline")
    results.sweep.knobs.append(KnobOutcome(
        knob=knob, title="Adafactor instead of Adam/AdamW (factored optimizer state)", status=status, trial=name,
        gain=_gain(ratio), reason="numerics guard: mean loss 10% higher" if status == "rejected" else None,
        code_change="+optimizer = torch.optim.Adafactor(model.parameters(), lr=lr)",
        changes_semantics=[msg("training_recipe", optimizer="AdamW", replacement="Adafactor",
                               caveat=msg("adafactor_recipe", adam_decay=False))]))
    return results


def _ps503(results: Results) -> list[Finding]:
    return [f for f in run_rules(results) if f.rule_id == "PS503"]


def test_optimizer_state_estimates_what_a_lean_optimizer_would_free_when_none_was_measured():
    (finding,) = _ps503(_optimizer_bound())
    assert finding.gain is None and finding.trial is None
    assert any(e.startswith("estimate: an 8-bit optimizer would free about 6.00 GiB") for e in finding.evidence)
    assert any("not measured here" in e for e in finding.evidence)
    assert "AdamW8bit" in finding.fix


def test_optimizer_state_points_at_the_measured_lean_optimizer():
    results = _lean_optimizer_run(_optimizer_bound())
    (finding,) = _ps503(results)
    assert finding.trial == "adafactor-mb48" and finding.gain.ratio == 1.3 and finding.measured_win
    assert finding.title.endswith("Adafactor instead of Adam/AdamW, measured")
    assert any("optimizer state 8.00 GiB → 0.01 GiB" in e and "torch.optim.Adafactor" in e for e in finding.evidence)
    assert any("micro-batch 48" in e for e in finding.evidence)
    assert not any(e.startswith("estimate") for e in finding.evidence)
    assert finding.fix == "+optimizer = torch.optim.Adafactor(model.parameters(), lr=lr)"
    assert any(c.code in ("training_recipe", "lean_optimizer_state") for c in finding.caveats)
    assert [f.rule_id for f in run_rules(results) if f.trial == "adafactor-mb48"] == ["PS503"]  # reported once


def test_optimizer_state_prefers_the_faster_measured_lean_optimizer():
    results = _lean_optimizer_run(_lean_optimizer_run(_optimizer_bound(), ratio=1.1),
                                  "adamw_8bit", ratio=1.4, micro=40, optimizer="8bit-torchao")
    (finding,) = _ps503(results)
    assert finding.trial == "adamw_8bit-mb40" and finding.gain.ratio == 1.4


def test_a_lean_optimizer_measured_slower_or_rejected_is_said_so():
    slower = _lean_optimizer_run(_optimizer_bound(), ratio=0.8)
    ranked, did_not_help = partition_findings(run_rules(slower))
    (finding,) = [f for f in did_not_help if f.rule_id == "PS503"]
    assert "memory it frees" in finding.why_not_here
    rejected = _lean_optimizer_run(_optimizer_bound(), status="rejected")
    (finding,) = _ps503(rejected)
    assert finding.gain is None and any("rejected by the numerics guard" in e for e in finding.evidence)
    assert "PS601" not in {f.rule_id for f in run_rules(rejected)}  # another optimizer's loss is not an overflow


def test_optimizer_state_stays_silent_when_small_and_the_measured_knob_is_reported_as_measured():
    small = _metrics(_results(), peak_memory_bytes=60 * GiB,
                     memory_breakdown=MemoryBreakdown(parameters=GiB, gradients=GiB, optimizer_state=2 * GiB,
                                                      activations_and_temporaries=56 * GiB))
    results = _lean_optimizer_run(small)
    assert _ps503(results) == []
    (generic,) = [f for f in run_rules(results) if f.trial == "adafactor-mb48"]
    assert generic.rule_id == "PS100" and any(c.code in ("training_recipe", "lean_optimizer_state") for c in generic.caveats)
# ------------------------------------------------------------------------- estimates state their bound


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_estimate_states_its_method_and_the_machine_limit_that_bounds_it(device):
    """Over every rule's firing fixture: an estimated gain never comes alone. A bound says so once, by its flag
    (Finding.upper_bound: the report's "up to"), not again in the method's words."""
    estimated = 0
    for make_case, _ in CASES.values():
        case = make_case()
        case.environment.device_type = device
        for f in run_rules(case):
            if f.estimated_gain is not None:
                estimated += 1
                assert f.estimate_method and f.estimate_bound, (f.rule_id, f.estimate_method, f.estimate_bound)
                assert "upper bound" not in f.estimate_method, f.rule_id
                assert f.gain is None  # measured beats believed: a measurement replaces the estimate
    assert estimated >= 3


def test_launch_bound_estimate_is_bounded_by_the_gpus_own_time():
    fires = CASES["PS301"][0]()
    (f,) = [f for f in run_rules(fires) if f.rule_id == "PS301"]
    assert f.estimated_gain == pytest.approx(1 / (1 - 0.6)) and "CUDA graphs" in f.estimate_method
    assert "40% of the step is not launch idle" in f.estimate_bound
    # Not starved (the GPU never waited on launches): a launch-bound flag alone is contradicted by its own evidence.
    quiet = _facts(_results(), launch={"launch_bound": True, "kernels_per_step": 900, "median_kernel_us": 4.0, "starved_fraction": 0.0})
    assert not [f for f in run_rules(quiet) if f.rule_id == "PS301"]
    # No GPU kernel in a CUDA trace (an A100 listed, CUPTI off): no "use CUDA graphs".
    bare = _facts(_results(), launch={"launch_bound": True, "kernels_per_step": 0, "median_kernel_us": None, "starved_fraction": 0.0})
    assert not [f for f in run_rules(bare) if f.rule_id == "PS301"]


def test_misaligned_gemm_estimate_uses_each_shapes_padded_wall_time_and_states_the_amdahl_bound():
    (f,) = [f for f in run_rules(CASES["PS401"][0]()) if f.rule_id == "PS401"]
    # 20 ms of a 100 ms step in the shape; padded, it runs in 2/3 of its time: 6.7 ms saved.
    assert f.estimated_gain == pytest.approx(0.1 / (0.1 - 0.02 / 3), rel=1e-3)
    assert "20% of the step" in f.estimate_bound and "at most 1.25×" in f.estimate_bound
    # A benchmarked shape that padding made slower saves nothing: no estimate.
    slower = _facts(_results(), step_time_s=0.1, gemm_shapes=[_gemm([8192, 768, 50257], ["n"], 0.02)],
                    gemm_alignment=[GemmAlignment(shape=[8192, 768, 50257], padded=[8192, 768, 50304], dtype="fp32", time_s=2e-3,
                                                  padded_time_s=3e-3, speedup_per_flop=0.67)])
    (f,) = [f for f in run_rules(slower) if f.rule_id == "PS401"]
    assert f.estimated_gain is None
    assert f.evidence[-1].startswith("padded, the benchmarked shapes took no less time per step on this device")


def _aligned_both_ways(recommended_precision: str | None) -> Results:
    """An fp32 baseline whose trace benchmarked the vocab GEMM in fp32 (padding: 2/3 of the time) and in bf16 (1/2),
    and a sweep recommending a configuration in ``recommended_precision`` (None: the baseline itself)."""
    results = _facts(_results(), step_time_s=0.1, gemm_shapes=[_gemm([8192, 768, 50257], ["n"], 0.02)], gemm_alignment=[
        GemmAlignment(shape=[8192, 768, 50257], padded=[8192, 768, 50304], dtype=dtype, time_s=3e-3, padded_time_s=padded,
                      speedup_per_flop=3e-3 / padded) for dtype, padded in (("fp32", 2e-3), ("bf16", 1.5e-3))])
    results.sweep = Sweep(baseline_trial="baseline", recommended_trial="baseline")
    if recommended_precision is not None:
        rec = make_trial("stack2-compile", knobs=["amp_bf16", "compile"])
        rec.config = dataclasses.replace(rec.config, precision=recommended_precision)
        results.trials.append(rec)
        results.sweep.recommended_trial = rec.name
    return results


@pytest.mark.parametrize(("recommended", "saved"), [(None, 0.02 / 3), ("fp32", 0.02 / 3), ("bf16", 0.01)])
def test_misaligned_gemm_estimate_is_measured_in_the_precision_the_recommendation_runs_in(recommended, saved):
    (f,) = [f for f in run_rules(_aligned_both_ways(recommended)) if f.rule_id == "PS401"]
    assert f.estimated_gain == pytest.approx(0.1 / (0.1 - saved), rel=1e-3)
    dtype = recommended or "fp32"
    assert any(e.startswith(f"micro-benchmark on this device in {dtype}") for e in f.evidence)


def test_misaligned_gemm_without_a_benchmark_in_the_recommended_precision_estimates_nothing():
    results = _aligned_both_ways("bf16")
    facts = results.trials[0].metrics.trace_facts
    facts.gemm_alignment = [r for r in facts.gemm_alignment if r.dtype == "fp32"]  # e.g. recorded by an older perfscope
    (f,) = [f for f in run_rules(results) if f.rule_id == "PS401"]
    assert f.estimated_gain is None
    assert any("no alignment micro-benchmark in bf16" in e and "only in fp32" in e for e in f.evidence)


def _gc_tail(times: list[float], pauses: list[float] | None) -> Results:
    """A baseline with these step times and, per step, these measured collector pauses (None: not measured)."""
    return _metrics(_results(), typical_step=summarize(times), step_times_s=times, wall_s=sum(times),
                    step_gc_pause_s=pauses or [], gc_pause_s=sum(pauses) if pauses is not None else None,
                    gc_collections=sum(1 for p in pauses if p) if pauses is not None else None)


def test_a_tail_is_blamed_on_the_collector_only_where_its_measured_pauses_explain_it():
    times = [0.1] * 20 + [0.3]
    (f,) = [f for f in run_rules(_gc_tail(times, [0.0] * 20 + [0.15])) if f.rule_id == "PS602"]
    # the estimate is the window without the measured pauses, never the whole tail
    assert f.estimated_gain == pytest.approx(sum(times) / (sum(times) - 0.15)) and "150.0 ms" in f.estimate_bound
    assert f.cause_share == pytest.approx(0.15 / sum(times)) and "75% of the slowest steps' time" in f.evidence[1]
    # the same tail without collector pauses in it (a loader's waits, a neighbour), or with the collector not measured
    for pauses in ([0.0] * 21, [0.15] + [0.0] * 20, None):
        assert "PS602" not in {f.rule_id for f in run_rules(_gc_tail(times, pauses))}, pauses
    assert "PS602" not in {f.rule_id for f in run_rules(_gc_tail([0.1] * 21, [0.0] * 21))}


def test_memory_rules_state_the_device_memory_that_bounds_their_fix():
    breakdown = MemoryBreakdown(parameters=2 * GiB, gradients=2 * GiB, optimizer_state=4 * GiB, activations_and_temporaries=2 * GiB)
    headroom = _metrics(_results(), peak_memory_bytes=10 * GiB, device_memory_capacity_bytes=80 * GiB, memory_breakdown=breakdown)
    (f,) = [f for f in run_rules(headroom) if f.rule_id == "PS501"]
    # 8 GiB fixed, 2 GiB of activations for 8 samples: (0.9 × 80 − 8) / (2 / 8) = 256 samples fit.
    assert "a micro-batch of about 256" in f.estimate_bound and "80.00 GiB" in f.estimate_bound
    near = _metrics(_results(), peak_memory_bytes=74 * GiB, peak_reserved_bytes=77 * GiB,
                    memory_breakdown=MemoryBreakdown(parameters=10 * GiB, gradients=10 * GiB, optimizer_state=20 * GiB,
                                                     activations_and_temporaries=34 * GiB))
    (f,) = [f for f in run_rules(near) if f.rule_id == "PS502"]
    assert "frees at most the activations and temporaries, 34.00 GiB" in f.estimate_bound
    (f,) = [f for f in run_rules(CASES["PS504"][0]()) if f.rule_id == "PS504"]
    assert "20.00 GiB" in f.estimate_bound
    (f,) = [f for f in run_rules(CASES["PS503"][0]()) if f.rule_id == "PS503"]
    assert "8.00 GiB" in f.estimate_bound


def test_a_knob_whose_run_did_not_apply_it_is_no_measurement():
    """Honest statuses: compile measured (slower) is reported where it belongs; compile whose run fell back to eager
    (the sweep records it as failed, "not applied") is no measurement for any rule."""
    measured = _with_knob(_results(), "compile", 0.8)
    assert [f.gain.ratio for f in run_rules(measured) if f.rule_id == "PS303"] == [0.8]
    fell_back = _with_knob(_results(), "compile", 1.5, status="failed")
    fell_back.sweep.knobs[0].reason = "not applied: torch.compile compiled no graph (dynamo fell back to eager)"
    assert [f for f in run_rules(fell_back) if f.trial == "compile" or f.rule_id in ("PS303", "PS100")] == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_every_finding_names_the_step_slices_its_fix_acts_on(rule_id):
    """Fires: a time fix names breakdown slices; memory and numerics fixes name none (they do not shorten the step)."""
    from perfscope.results.breakdown import SLICES, WHOLE_STEP

    rule = next(r for r in all_rules() if r.id == rule_id)
    for f in run(CASES[rule_id][0](), [rule]):
        assert set(f.addresses) <= set(SLICES) | {WHOLE_STEP}, f.addresses
        memory_or_numerics = rule.groups[0] == "memory" and rule_id != "PS501" or rule_id == "PS601"
        assert bool(f.addresses) != memory_or_numerics, (rule_id, f.addresses)

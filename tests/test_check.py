"""The gate's decision rule, comparability checks and trial selection, on synthetic per-step samples."""

import pytest

from perfscope.check import GateOptions, MetricCheck, run_gate
from perfscope.check.compat import find_differences
from perfscope.check.metrics import MFU, SAMPLES_PER_S, STEP_TIME, Side
from perfscope.results import Peak, Sweep
from perfscope.stats import mann_whitney_min_p
from tests.factories import make_results, make_trial


def evaluate(base_trial, cur_trial, *, metric=MFU, max_drop=0.05):
    base, cur = make_results([base_trial]), make_results([cur_trial])
    check = MetricCheck(metric=metric, max_drop=max_drop)
    return check.evaluate(Side(results=cur, trial=cur_trial), Side(results=base, trial=base_trial))


def pair(cur_median_s, *, seed, n=30, noise=0.02, base_median_s=0.1):
    return (
        make_trial(median_s=base_median_s, n=n, noise=noise, seed=1000 + seed),
        make_trial(median_s=cur_median_s, n=n, noise=noise, seed=2000 + seed),
    )


# ------------------------------------------------------------------------------------ decision rule

@pytest.mark.parametrize("metric", [MFU, SAMPLES_PER_S, STEP_TIME])
@pytest.mark.parametrize("seed", range(8))
def test_noise_only_passes(metric, seed):
    assert evaluate(*pair(0.1, seed=seed), metric=metric).status == "pass"


@pytest.mark.parametrize("n", [20, 30])
@pytest.mark.parametrize("seed", range(8))
def test_a_real_ten_percent_mfu_drop_fails(n, seed):
    verdict = evaluate(*pair(0.1 / 0.9, seed=seed, n=n))
    assert verdict.status == "regression", verdict.message
    assert verdict.change == pytest.approx(-0.10, abs=0.02)
    assert verdict.p_value < 0.002


@pytest.mark.parametrize("seed", range(8))
def test_a_three_percent_drop_within_a_five_percent_tolerance_passes(seed):
    verdict = evaluate(*pair(0.1 / 0.97, seed=seed))
    assert verdict.status == "pass", verdict.message


def test_a_precisely_measured_three_percent_drop_fails_a_one_percent_tolerance():
    verdict = evaluate(*pair(0.1 / 0.97, seed=0, noise=0.005), max_drop=0.01)
    assert verdict.status == "regression", verdict.message


@pytest.mark.parametrize("metric", [MFU, SAMPLES_PER_S, STEP_TIME])
def test_an_improvement_passes(metric):
    verdict = evaluate(*pair(0.08, seed=0), metric=metric)
    assert verdict.status == "pass"
    assert (verdict.change > 0) == metric.higher_is_better  # faster: MFU up, step time down


def test_step_time_is_gated_on_its_rise():
    verdict = evaluate(*pair(0.111, seed=0), metric=STEP_TIME)
    assert verdict.status == "regression"
    assert verdict.change == pytest.approx(0.11, abs=0.02)


def test_too_few_samples_is_inconclusive_never_a_pass():
    verdict = evaluate(*pair(0.1, seed=0, n=4))
    assert verdict.status == "inconclusive"
    assert "too few samples" in verdict.message


def test_an_interval_too_wide_to_tell_is_inconclusive():
    # 20% per-step noise: a 5% drop cannot be told apart from the 5% limit with 10 steps.
    verdict = evaluate(*pair(0.1 / 0.95, seed=0, n=10, noise=0.2))
    assert verdict.status == "inconclusive"
    assert "too wide" in verdict.message


def test_few_steps_fall_back_on_the_interval_when_the_rank_test_cannot_reach_alpha():
    assert mann_whitney_min_p(6, 6) > 0.002  # precondition: the rank test is powerless at 6 vs 6
    verdict = evaluate(*pair(0.1 / 0.7, seed=0, n=6, noise=0.01))
    assert verdict.status == "regression"
    assert "interval only" in verdict.message


def test_mann_whitney_min_p_matches_the_exact_test():
    assert mann_whitney_min_p(5, 5) == pytest.approx(2 / 252)
    assert mann_whitney_min_p(30, 30) < 1e-6


def test_fails_returns_a_message_only_on_regression():
    check = MetricCheck(metric=MFU, max_drop=0.05)
    base_t, slow_t = pair(0.1 / 0.9, seed=0)
    _, same_t = pair(0.1, seed=0)
    base = Side(results=make_results([base_t]), trial=base_t)
    assert "worse than the 5.0% tolerance" in check.fails(Side(results=make_results([slow_t]), trial=slow_t), base)
    assert check.fails(Side(results=make_results([same_t]), trial=same_t), base) is None


def test_verdicts_are_reproducible():
    assert evaluate(*pair(0.104, seed=3)) == evaluate(*pair(0.104, seed=3))


def test_max_drop_is_validated():
    with pytest.raises(ValueError):
        MetricCheck(metric=MFU, max_drop=1.0)


# ---------------------------------------------------------------------------------- comparability

def sides(mutate_current=lambda r: None):
    base, cur = make_results([make_trial(seed=1)]), make_results([make_trial(seed=2)])
    mutate_current(cur)
    return Side(results=cur, trial=cur.trials[0]), Side(results=base, trial=base.trials[0])


@pytest.mark.parametrize(
    "what, mutate",
    [
        ("device type", lambda r: setattr(r.environment, "device_type", "cpu")),
        ("device name", lambda r: setattr(r.environment, "device_name", "NVIDIA A100-SXM4-80GB")),
        ("dtype", lambda r: r.trials[0].config.update(precision="bf16")),
        ("peak", lambda r: setattr(r, "peak", Peak(tflops=312.0, dtype="bf16", source="datasheet"))),
        ("workload sha256", lambda r: setattr(r.workload, "sha256", "1" * 64)),
        ("workload name", lambda r: setattr(r.workload, "name", "other")),
        ("FLOPs", lambda r: setattr(r.trials[0].metrics, "flops_per_step", 5e13)),
        ("samples per step", lambda r: setattr(r.trials[0].metrics, "samples_per_step", 16)),
    ],
)
def test_each_identity_difference_blocks_the_comparison(what, mutate):
    current, baseline = sides(mutate)
    differences = find_differences(current, baseline, metric_ids={"mfu"})
    assert [d.what for d in differences if d.blocking and what in d.what], differences


def test_identical_runs_have_no_differences():
    assert find_differences(*sides(), metric_ids={"mfu", "samples_per_s", "step_time"}) == []


def test_torch_version_only_warns():
    current, baseline = sides(lambda r: setattr(r.environment, "torch_version", "2.4.0"))
    (difference,) = find_differences(current, baseline, metric_ids={"mfu"})
    assert difference.what == "torch version" and not difference.blocking


def test_peak_and_flops_only_matter_for_mfu():
    def mutate(r):
        r.peak = Peak(tflops=1.23, dtype="fp32", source="measured matmul ceiling")
        r.trials[0].metrics.flops_per_step = 1.0

    current, baseline = sides(mutate)
    assert find_differences(current, baseline, metric_ids={"samples_per_s"}) == []
    assert len(find_differences(current, baseline, metric_ids={"mfu"})) == 2


# ------------------------------------------------------------------------------------------- gate

def test_a_mismatch_is_unusable_unless_allowed():
    base = make_results([make_trial(seed=1)])
    cur = make_results([make_trial(seed=2)])
    cur.environment.device_name = "NVIDIA A100-SXM4-80GB"
    refused = run_gate(cur, base, GateOptions())
    assert refused.outcome == "unusable" and refused.verdicts == []
    allowed = run_gate(cur, base, GateOptions(allow_mismatch=True))
    assert allowed.outcome == "pass"
    assert any("device name" in w for w in allowed.warnings)


def test_mismatched_flops_with_allow_mismatch_compare_real_mfu_per_step():
    base = make_results([make_trial(seed=1, flops_per_step=4e13)])
    cur = make_results([make_trial(seed=2, flops_per_step=3e13)])  # same speed, 25% fewer model FLOPs
    report = run_gate(cur, base, GateOptions(allow_mismatch=True))
    assert report.outcome == "regression"
    assert report.verdicts[0].change == pytest.approx(-0.25, abs=0.02)


def test_a_failed_current_trial_is_a_regression():
    base = make_results([make_trial(seed=1)])
    cur = make_results([make_trial(status="oom")])
    report = run_gate(cur, base, GateOptions(metrics=("mfu", "step_time")))
    assert report.outcome == "regression"
    assert all("oom" in v.message for v in report.verdicts) and len(report.verdicts) == 2


def test_a_failed_baseline_trial_is_unusable():
    report = run_gate(make_results([make_trial()]), make_results([make_trial(status="crashed")]), GateOptions())
    assert report.outcome == "unusable"
    assert "baseline update" in report.errors[0]


def test_a_missing_trial_is_unusable_and_named():
    report = run_gate(make_results([make_trial()]), make_results([make_trial()]), GateOptions(trial="amp_bf16"))
    assert report.outcome == "unusable"
    assert "no trial 'amp_bf16'" in report.errors[0]


def test_unavailable_mfu_is_unusable_with_the_alternative():
    cur = make_results([make_trial(seed=2)])
    base = make_results([make_trial(seed=1)])
    for r in (cur, base):
        r.trials[0].metrics.flops_per_step = None
        r.trials[0].metrics.unavailable["flops_per_step"] = "FlopCounterMode failed"
    report = run_gate(cur, base, GateOptions())
    assert report.outcome == "unusable"
    assert "FlopCounterMode failed" in report.errors[0] and "samples_per_s" in report.errors[0]
    assert run_gate(cur, base, GateOptions(metrics=("samples_per_s",))).outcome == "pass"


def test_recommended_compares_each_files_sweep_pick():
    base = make_results([make_trial(seed=1), make_trial("amp_bf16", median_s=0.05, seed=2)])
    cur = make_results([make_trial(seed=3), make_trial("amp_bf16+fused", median_s=0.05 / 0.8, seed=4)])
    base.sweep = Sweep(baseline_trial="baseline", recommended_trial="amp_bf16")
    cur.sweep = Sweep(baseline_trial="baseline", recommended_trial="amp_bf16+fused")
    report = run_gate(cur, base, GateOptions(trial="recommended"))
    assert (report.baseline_trial, report.current_trial) == ("amp_bf16", "amp_bf16+fused")
    assert report.outcome == "regression"
    assert run_gate(cur, base, GateOptions()).outcome == "pass"  # the default trial is "baseline"


def test_recommended_without_a_sweep_is_unusable():
    report = run_gate(make_results(), make_results(), GateOptions(trial="recommended"))
    assert report.outcome == "unusable"
    assert "no sweep-recommended trial" in report.errors[0]


def test_every_verdict_is_collected_before_the_outcome():
    base = make_results([make_trial(seed=1, n=30)])
    cur = make_results([make_trial(median_s=0.12, seed=2, n=30)])
    report = run_gate(cur, base, GateOptions(metrics=("mfu", "samples_per_s", "step_time")))
    assert [v.status for v in report.verdicts] == ["regression"] * 3


def test_a_dtype_missing_from_one_file_only_warns():
    current, baseline = sides(lambda r: r.trials[0].config.pop("precision"))
    (difference,) = find_differences(current, baseline, metric_ids={"mfu"})
    assert difference.what.startswith("dtype") and not difference.blocking


def test_measured_cpu_ceilings_do_not_block_mfu_gating():
    """Two CPU runs whose measured ceilings differ (noise) are still comparable on MFU."""
    base = make_results([make_trial(median_s=0.1, seed=1)], device_type="cpu")
    cur = make_results([make_trial(median_s=0.1, seed=2)], device_type="cpu")
    base.peak = Peak(tflops=0.80, dtype="bf16", source="measured matmul ceiling (CPU)")
    cur.peak = Peak(tflops=0.55, dtype="bf16", source="measured matmul ceiling (CPU)")
    report = run_gate(cur, base, GateOptions(metrics=("mfu",)))
    assert report.outcome == "pass", report
    assert any("baseline's" in w for w in report.warnings)
    cur.peak = Peak(tflops=0.55, dtype="user", source="--peak-tflops (user supplied)")
    assert run_gate(cur, base, GateOptions(metrics=("mfu",))).outcome == "unusable"

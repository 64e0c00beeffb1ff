"""The sweep's search logic, with a fake `measure` (no subprocesses): fast and exact about the rules."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from perfscope.errors import UserError
from perfscope.results import Environment, Trial, TrialMetrics
from perfscope.results.config import TrialConfig
from perfscope.search.knobs import REGISTRY, Knob, KnobContext, ModelFacts
from perfscope.search.sweep import Sweeper, SweepOptions
from perfscope.stats import summarize
from perfscope.workload import Workload

H100 = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", cpu_cores_logical=16)


def _workload(dataset: bool = False) -> Workload:
    if dataset:
        return Workload(model=lambda: None, loss=lambda m, b: None, dataset=list, batch_size=8)
    return Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8)


def _ctx(*, device: str = "cuda", conv: bool = False, blocks: int = 12, dataset: bool = False, **base: object) -> KnobContext:
    env = H100 if device == "cuda" else Environment(device_type="cpu", device_name="cpu", cpu_cores_logical=2)
    return KnobContext(
        workload=_workload(dataset),
        base=TrialConfig(device=device, micro_batch_size=8, **base),  # type: ignore[arg-type]
        environment=env,
        model=ModelFacts(parameter_count=1000, has_conv2d=conv, repeated_blocks=blocks, optimizer_class="AdamW"),
    )


def _trial(name: str, config: TrialConfig, median_s: float, *, status: str = "ok", loss_shift: float = 0.0, seed: int = 0,
           peak_fraction: float = 0.05) -> Trial:
    if status != "ok":
        return Trial(name=name, config=config.to_dict(), status=status, error=f"{status}: simulated", wall_time_s=1.0)  # type: ignore[arg-type]
    rng = random.Random(seed)
    times = [median_s * (1 + rng.gauss(0, 0.01)) for _ in range(30)]
    losses = [2.0 - 0.01 * i + loss_shift for i in range(30)]
    capacity = 80 * 2**30
    metrics = TrialMetrics(
        steps=30, warmup_steps=3, micro_batch_size=config.micro_batch_size, grad_accum_steps=config.grad_accum_steps,
        samples_per_step=config.samples_per_step, step_times_s=times, data_wait_s=[0.0] * 30, step_time_s=summarize(times),
        data_wait_fraction=0.0, samples_per_s=config.samples_per_step / summarize(times).median, losses=losses,
        first_grad_norm=1.0, peak_reserved_bytes=int(peak_fraction * capacity * config.micro_batch_size / 8),
        device_memory_capacity_bytes=capacity,
    )
    return Trial(name=name, config=config.to_dict(), status="ok", metrics=metrics, wall_time_s=1.0)


Speed = Callable[[TrialConfig], float]


def _fake_measure(speed: Speed, *, oom_above: int | Callable[[TrialConfig], int] | None = None, loss_shift: Callable[[TrialConfig], float] = lambda c: 0.0):
    calls: list[str] = []
    trials: list[Trial] = []

    def measure(name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        calls.append(name)
        limit = oom_above(config) if callable(oom_above) else oom_above
        if limit is not None and config.micro_batch_size > limit:
            trial = _trial(name, config, 1.0, status="oom")
        else:
            trial = _trial(name, config, speed(config), loss_shift=loss_shift(config), seed=len(calls))
        trials.append(trial)
        return trial

    measure.calls = calls  # type: ignore[attr-defined]
    measure.trials = trials  # type: ignore[attr-defined]
    return measure


def _per_sample_speed(factors: dict[str, float], micro_gain: float = 0.9) -> Speed:
    """Step time = 0.1 s per 8 samples, divided by each active knob's factor; bigger micro-batches are a bit cheaper."""

    def speed(c: TrialConfig) -> float:
        t = 0.1 * c.samples_per_step / 8
        if c.precision == "bf16":
            t /= factors.get("amp_bf16", 1.0)
        if c.precision == "fp16":
            t /= factors.get("amp_fp16", 1.0)
        if c.compile == "default":
            t /= factors.get("compile", 1.0)
        if c.tf32:
            t /= factors.get("tf32", 1.0)
        if c.optimizer_impl == "fused":
            t /= factors.get("fused_optimizer", 1.0)
        if c.activation_checkpointing:
            t *= 1.3
        return t * (micro_gain ** (c.micro_batch_size // 8 - 1) if c.micro_batch_size > 8 else 1.0)

    return speed


def _run(ctx: KnobContext, measure, **options) -> Sweeper:
    baseline = measure("baseline", ctx.base, [])
    sweeper = Sweeper(measure=measure, ctx=ctx, baseline=baseline, options=SweepOptions(**options))
    sweeper.run()
    return sweeper


def _outcome(sweeper: Sweeper, knob_id: str):
    return next(o for o in sweeper.sweep.knobs if o.knob == knob_id)


def test_winners_stack_and_the_recommendation_is_remeasured():
    measure = _fake_measure(_per_sample_speed({"amp_bf16": 1.8, "compile": 1.3}))
    sweeper = _run(_ctx(), measure, skip=["micro_batch"])
    sweep = sweeper.sweep
    assert sweep.recommended_trial == "recommended"
    assert sweep.recommended_knobs == ["amp_bf16", "compile"]
    assert sweep.recommended_gain.ratio == pytest.approx(1.8 * 1.3, rel=0.03)
    assert sweep.recommended_gain.significant
    assert sweep.knobs[0].knob == "amp_bf16"  # ranked best-first
    assert any("numerics" in s for s in _outcome(sweeper, "amp_bf16").changes_semantics)
    assert "recommended" in measure.calls and "baseline-repeat" in measure.calls


def test_noise_only_recommends_the_baseline_itself():
    measure = _fake_measure(_per_sample_speed({}))
    sweep = _run(_ctx(), measure, skip=["micro_batch"]).sweep
    assert sweep.recommended_trial == "baseline" and sweep.recommended_knobs == []
    assert not any(o.gain and o.gain.significant and o.gain.ratio > 1 for o in sweep.knobs)


def test_a_slower_knob_is_reported_as_a_slowdown_and_not_recommended():
    measure = _fake_measure(_per_sample_speed({"compile": 0.7, "amp_bf16": 1.5}))
    sweeper = _run(_ctx(), measure, skip=["micro_batch"])
    compile_outcome = _outcome(sweeper, "compile")
    assert compile_outcome.status == "measured"
    assert compile_outcome.gain.ratio == pytest.approx(0.7, rel=0.03) and compile_outcome.gain.significant
    assert "compile" not in sweeper.sweep.recommended_knobs


def test_numerics_guard_rejects_a_fast_but_wrong_configuration():
    measure = _fake_measure(_per_sample_speed({"amp_fp16": 2.0, "amp_bf16": 1.5}), loss_shift=lambda c: 5.0 if c.precision == "fp16" else 0.0)
    sweeper = _run(_ctx(), measure, skip=["micro_batch"])
    fp16 = _outcome(sweeper, "amp_fp16")
    assert fp16.status == "rejected" and "numerics guard" in fp16.reason
    assert sweeper.sweep.recommended_knobs == ["amp_bf16"]


def test_oom_during_micro_batch_search_is_survived_and_checkpointing_is_paired():
    measure = _fake_measure(_per_sample_speed({}, micro_gain=0.8), oom_above=32)
    sweeper = _run(_ctx(), measure, only=["micro_batch", "activation_checkpointing"])
    points = {p.micro_batch_size: p.status for p in sweeper.sweep.micro_batch}
    assert points[8] == "ok" and points[16] == "ok" and points[32] == "ok" and points[64] == "oom"
    assert 32 < max(points) and any(32 < m < 64 for m in points)  # one bisection step between fit and OOM
    ckpt = _outcome(sweeper, "activation_checkpointing")
    assert ckpt.trial == "activation_checkpointing-mb64" and "paired with micro-batch 64" in ckpt.reason
    micro = _outcome(sweeper, "micro_batch")
    assert micro.status == "measured" and any("global batch 8 →" in s for s in micro.changes_semantics)
    # a global-batch change is never part of the recommendation
    assert "micro_batch" not in sweeper.sweep.recommended_knobs


def test_accumulation_keeps_the_global_batch_in_the_recommendation():
    measure = _fake_measure(_per_sample_speed({}, micro_gain=0.8))
    ctx = _ctx(grad_accum_steps=4)  # global batch 32 in micro-batches of 8
    sweeper = _run(ctx, measure, only=["micro_batch", "grad_accum"])
    assert sweeper.sweep.recommended_knobs == ["grad_accum"]
    recommended = next(p for p in sweeper.sweep.micro_batch if p.micro_batch_size == 32)
    assert recommended.grad_accum_steps == 1  # 32 × 1 = the user's 8 × 4
    assert _outcome(sweeper, "grad_accum").changes_semantics == []
    assert _outcome(sweeper, "grad_accum").trial == "mb32"
    rec = TrialConfig.from_dict(next(t for t in measure.trials if t.name == "recommended").config)
    assert rec.samples_per_step == 32 and rec.micro_batch_size == 32
    # the fastest point overall (micro-batch 128, one per step) changes the global batch: reported, flagged, not recommended
    micro = _outcome(sweeper, "micro_batch")
    assert micro.trial == "mb128" and any("global batch 32 → 128" in s for s in micro.changes_semantics)


def test_budget_stops_new_trials():
    measure = _fake_measure(_per_sample_speed({"amp_bf16": 1.5}))
    ctx = _ctx()
    baseline = measure("baseline", ctx.base, [])
    clock = iter(range(0, 10_000, 10))
    sweeper = Sweeper(measure=measure, ctx=ctx, baseline=baseline, options=SweepOptions(budget_s=25), elapsed=lambda: next(clock))
    sweep = sweeper.run()
    assert sweep.stopped_early and "budget" in sweep.stopped_early
    assert any(o.status == "skipped" and "budget" in (o.reason or "") for o in sweep.knobs)
    assert len(measure.calls) < 5


def test_unknown_knob_ids_are_a_user_error():
    with pytest.raises(UserError, match="unknown knob id.*valid ids: amp_bf16"):
        SweepOptions(only=["amp_bf17"])


class _SlowKnob(Knob):
    """A fake knob injected into the registry: it makes every step 40% slower."""

    id = "fake_slow"
    title = "a knob that slows the step down"
    reference = "https://example.invalid/fake"

    def code_change(self, ctx):
        return "+slow_down()"

    def variants(self, ctx):
        return [{"gc_mode": "disable"}]


def test_an_injected_slow_knob_is_a_slowdown_never_a_win(monkeypatch):
    import perfscope.search.knobs
    import perfscope.search.sweep

    registry = [*REGISTRY, _SlowKnob()]
    monkeypatch.setattr(perfscope.search.sweep, "REGISTRY", registry)
    monkeypatch.setattr(perfscope.search.knobs, "REGISTRY", registry)

    def speed(c: TrialConfig) -> float:
        return 0.1 * (1.4 if c.gc_mode == "disable" else 1.0)

    measure = _fake_measure(speed)
    sweeper = _run(_ctx(), measure, only=["fake_slow"])
    slow = _outcome(sweeper, "fake_slow")
    assert slow.status == "measured" and slow.gain.significant
    assert slow.gain.ratio == pytest.approx(1 / 1.4, rel=0.03) and slow.gain.high < 1.0  # reported as a slowdown
    assert sweeper.sweep.recommended_trial == "baseline" and sweeper.sweep.recommended_knobs == []
    assert sweeper.sweep.knobs[0].knob == "fake_slow"  # the only measured knob; the rest say why they were not tried
    assert all(o.status in ("skipped", "inapplicable") for o in sweeper.sweep.knobs[1:])


def test_stack_slower_than_its_parts_recommends_the_baseline():
    """Each knob wins alone, but together they interfere: the re-measured stack is slower, so the baseline stays."""

    def speed(c: TrialConfig) -> float:
        if c.precision == "bf16" and c.compile == "default":
            return 0.15
        return 0.1 / (1.5 if c.precision == "bf16" or c.compile == "default" else 1.0)

    measure = _fake_measure(speed)
    sweep = _run(_ctx(), measure, only=["amp_bf16", "compile"]).sweep
    # compile did not join the stack (the stack trial was slower); the bf16-only recommendation is re-measured
    assert sweep.recommended_knobs in (["amp_bf16"], ["compile"])
    assert sweep.recommended_gain.ratio > 1 and sweep.recommended_gain.significant

    def recommended_slower(c: TrialConfig) -> float:
        return 0.1 / (1.5 if c.precision == "bf16" else 1.0)

    measure = _fake_measure(recommended_slower)
    baseline = measure("baseline", _ctx().base, [])
    original = measure.__call__

    def flaky(name, config, knobs):  # the re-measured recommendation comes out slower than the baseline
        return _trial(name, config, 0.12, seed=99) if name == "recommended" else original(name, config, knobs)

    sweeper = Sweeper(measure=flaky, ctx=_ctx(), baseline=baseline, options=SweepOptions(only=["amp_bf16"]))
    sweep = sweeper.run()
    assert sweep.recommended_trial == "baseline" and sweep.recommended_knobs == [] and sweep.recommended_gain is None
    assert any("not significantly faster" in n for n in sweep.notes)
    assert any("re-measured" in n and "run-to-run noise" in n for n in sweep.notes)  # the disagreement is stated


def test_worker_options_are_measured_on_top_of_workers_and_stack_after_them():
    def speed(c: TrialConfig) -> float:
        t = 0.2 / (1.6 if c.num_workers >= 8 else 1.3 if c.num_workers > 0 else 1.0)
        return t / (1.2 if c.persistent_workers else 1.0)

    measure = _fake_measure(speed)
    sweeper = _run(_ctx(dataset=True), measure, only=["dataloader_workers", "persistent_workers", "prefetch_factor"])
    workers, persistent = _outcome(sweeper, "dataloader_workers"), _outcome(sweeper, "persistent_workers")
    prefetch = _outcome(sweeper, "prefetch_factor")
    assert workers.gain.ratio == pytest.approx(1.6, rel=0.03)
    assert persistent.gain.ratio == pytest.approx(1.2, rel=0.03)  # the increment over the workers trial
    assert "on top of dataloader_workers" in persistent.reason
    persistent_trial = next(t for t in measure.trials if t.name == "persistent_workers")
    assert persistent_trial.config["num_workers"] == 8 and persistent_trial.config["persistent_workers"]
    assert not prefetch.gain.significant
    assert sweeper.sweep.recommended_knobs == ["dataloader_workers", "persistent_workers"]


def test_worker_options_without_workers_to_build_on_are_skipped():
    measure = _fake_measure(_per_sample_speed({}))
    sweeper = _run(_ctx(dataset=True), measure, only=["persistent_workers"])
    assert _outcome(sweeper, "persistent_workers").status == "skipped"
    assert "needs dataloader_workers" in _outcome(sweeper, "persistent_workers").reason


def test_micro_batch_is_re_searched_when_the_stack_frees_memory():
    """fp32 fits micro-batch 16; bf16 halves activations and fits 32: the stack re-searches and takes 32."""

    def fits(c: TrialConfig) -> int:
        return 32 if c.precision == "bf16" else 16

    measure = _fake_measure(_per_sample_speed({"amp_bf16": 1.5}, micro_gain=0.8), oom_above=fits)
    sweeper = _run(_ctx(grad_accum_steps=8), measure, only=["amp_bf16", "grad_accum"])  # global batch 64
    sweep = sweeper.sweep
    assert {p.micro_batch_size: p.status for p in sweep.micro_batch}[32] == "oom"
    assert any(name.startswith("stack-mb") for name in measure.calls)
    assert sweep.recommended_knobs == ["amp_bf16", "grad_accum"]
    rec = TrialConfig.from_dict(next(t for t in measure.trials if t.name == "recommended").config)
    assert (rec.precision, rec.micro_batch_size, rec.grad_accum_steps) == ("bf16", 32, 2)
    assert any("re-searched" in n for n in sweep.notes)


def test_numerics_guard_with_a_different_micro_batch():
    from perfscope.search.numerics import compare_numerics

    base_cfg = TrialConfig(micro_batch_size=8, grad_accum_steps=4)
    base = _trial("baseline", base_cfg, 0.1)
    split = base_cfg.replace(micro_batch_size=32, grad_accum_steps=1)
    # other samples per step (losses differ step by step by 3%) but the same level: accepted
    ok = _trial("mb32", split, 0.08, loss_shift=0.03)
    assert compare_numerics(base, ok).ok
    # an accumulation-scale error: gradients ×4 with the same global batch
    wrong = _trial("mb32", split, 0.08)
    wrong.metrics.first_grad_norm = 4.0
    verdict = compare_numerics(base, wrong)
    assert not verdict.ok and "accumulation" in verdict.reason
    # a diverging loss level: rejected whatever the batch
    diverged = _trial("mb64", base_cfg.replace(micro_batch_size=64, grad_accum_steps=1), 0.08, loss_shift=1.0)
    assert not compare_numerics(base, diverged).ok
    # the same micro-batch: step-by-step at 2% (fp32)
    assert not compare_numerics(base, _trial("x", base_cfg, 0.1, loss_shift=0.1)).ok
    assert compare_numerics(base, _trial("x", base_cfg.replace(precision="bf16"), 0.1, loss_shift=0.1)).ok


def test_non_finite_loss_is_rejected():
    measure = _fake_measure(_per_sample_speed({"amp_fp16": 2.0}))
    original = measure

    def overflowing(name, config, knobs):
        trial = original(name, config, knobs)
        if config.precision == "fp16":
            trial.metrics.losses[5] = None
        return trial

    baseline = overflowing("baseline", _ctx().base, [])
    sweep = Sweeper(measure=overflowing, ctx=_ctx(), baseline=baseline, options=SweepOptions(only=["amp_fp16"])).run()
    fp16 = next(o for o in sweep.knobs if o.knob == "amp_fp16")
    assert fp16.status == "rejected" and "non-finite" in fp16.reason
    assert sweep.recommended_knobs == []


@pytest.mark.slow
def test_real_sweep_on_the_tiny_example(tmp_path):
    """End to end: real trial processes; the sweep section is written and consistent with the trials."""
    from pathlib import Path

    from perfscope.cli import main
    from perfscope.results import Results

    example = Path(__file__).parent.parent / "examples" / "tiny_transformer.py"
    code = main(["analyze", str(example), "--device", "cpu", "--out", str(tmp_path), "--steps", "8", "--warmup", "2",
                 "--only", "amp_bf16,gc_freeze", "--no-trace"])
    assert code == 0
    results = Results.load(tmp_path / "results.json")
    sweep = results.sweep
    names = {t.name for t in results.trials}
    assert {"baseline", "baseline-repeat", "amp_bf16", "gc_freeze"} <= names
    assert sweep.recommended_trial in names
    by_id = {o.knob: o for o in sweep.knobs}
    assert by_id["amp_bf16"].status in ("measured", "rejected") and by_id["amp_bf16"].gain is not None
    assert by_id["tf32"].status == "inapplicable" and by_id["compile"].status == "skipped"
    assert (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_real_oom_during_the_micro_batch_search_is_survived(tmp_path):
    """Real trial processes on a workload that raises torch.OutOfMemoryError above micro-batch 16."""
    from pathlib import Path

    from perfscope.cli import main
    from perfscope.results import Results

    workload = Path(__file__).parent / "workloads" / "sweep_oom.py"
    code = main(["analyze", str(workload), "--device", "cpu", "--out", str(tmp_path), "--steps", "6", "--warmup", "1",
                 "--only", "grad_accum,micro_batch,activation_checkpointing", "--no-trace"])
    assert code == 0
    results = Results.load(tmp_path / "results.json")
    sweep = results.sweep
    points = {p.micro_batch_size: p for p in sweep.micro_batch}
    assert points[8].status == "ok" and points[16].status == "ok" and points[32].status == "oom"
    assert points[16].grad_accum_steps == 2  # 16 × 2 keeps the user's global batch of 8 × 4
    assert results.trial("mb32").status == "oom"
    by_id = {o.knob: o for o in sweep.knobs}
    assert by_id["micro_batch"].status == "measured" and by_id["grad_accum"].status == "measured"
    assert by_id["activation_checkpointing"].status in ("measured", "rejected")  # CPU: tried alone
    # never below the baseline: either a significant win or the baseline itself
    assert sweep.recommended_trial == "baseline" or (sweep.recommended_gain.significant and sweep.recommended_gain.ratio > 1)

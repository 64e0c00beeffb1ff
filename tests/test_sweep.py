"""The sweep's search logic, with a fake `measure` (no subprocesses): fast and exact about the rules."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from perfscope.knobs import REGISTRY, KnobContext, ModelFacts
from perfscope.results import Environment, Trial, TrialMetrics
from perfscope.stats import summarize
from perfscope.sweep import Sweeper, SweepOptions
from perfscope.trial.config import TrialConfig
from perfscope.workload import UserError, Workload

H100 = Environment(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", cpu_cores_logical=16)


def _workload(dataset: bool = False) -> Workload:
    if dataset:
        return Workload(model=lambda: None, loss=lambda m, b: None, dataset=lambda: [], batch_size=8)
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


def _fake_measure(speed: Speed, *, oom_above: int | None = None, loss_shift: Callable[[TrialConfig], float] = lambda c: 0.0):
    calls: list[str] = []

    def measure(name: str, config: TrialConfig, knobs: list[str]) -> Trial:
        calls.append(name)
        if oom_above is not None and config.micro_batch_size > oom_above:
            return _trial(name, config, 1.0, status="oom")
        return _trial(name, config, speed(config), loss_shift=loss_shift(config), seed=len(calls))

    measure.calls = calls  # type: ignore[attr-defined]
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


def test_every_knob_applies_or_explains_itself():
    for ctx in (_ctx(), _ctx(device="cpu", blocks=0), _ctx(precision="bf16", tf32=True, compile="default"), _ctx(dataset=True, conv=True)):
        for knob in REGISTRY:
            reason = knob.applies(ctx)
            assert reason is None or (isinstance(reason, str) and len(reason) > 10), (knob.id, reason)
            if reason is None and not knob.search:
                for changes in knob.variants(ctx):
                    assert knob.apply(ctx.base, changes) != ctx.base  # a variant always changes something


@pytest.mark.parametrize(
    ("knob_id", "ctx", "expected"),
    [
        ("tf32", _ctx(device="cpu"), "NVIDIA GPUs"),
        ("amp_bf16", _ctx(precision="bf16"), "already runs bf16"),
        ("amp_bf16", _ctx(), None),
        ("channels_last", _ctx(), "no 2-D convolutions"),
        ("channels_last", _ctx(conv=True), None),
        ("dataloader_workers", _ctx(), "not a Dataset"),
        ("pin_memory", _ctx(dataset=True, pin_memory=True), "already on"),
        ("activation_checkpointing", _ctx(blocks=0), "no repeated blocks"),
        ("compile", _ctx(compile="default"), "already compiled"),
        ("compile_reduce_overhead", _ctx(device="cpu"), "need a GPU"),
        ("expandable_segments", _ctx(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}), "already on"),
    ],
)
def test_knob_applicability(knob_id, ctx, expected):
    reason = next(k for k in REGISTRY if k.id == knob_id).applies(ctx)
    assert reason is None if expected is None else expected in reason


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
    sweeper = _run(ctx, measure, only=["micro_batch"])
    assert sweeper.sweep.recommended_knobs == ["micro_batch"]
    recommended = next(p for p in sweeper.sweep.micro_batch if p.micro_batch_size == 32)
    assert recommended.grad_accum_steps == 1  # 32 × 1 = the user's 8 × 4
    assert _outcome(sweeper, "micro_batch").changes_semantics == []


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

"""The sweep's search logic, with a fake `measure` (no subprocesses): fast and exact about the rules."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

import pytest

from perfscope.errors import UserError
from perfscope.knobs import REGISTRY, Knob, KnobContext, ModelFacts
from perfscope.results import Environment, Trial, TrialMetrics, Window
from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.search.compare import could_still_win
from perfscope.search.microbatch import search_micro_batch
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from perfscope.stats import summarize
from perfscope.wording import words
from perfscope.workload import Workload
from tests.factories import load, make_results, make_trial

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


RUNS_STEPS = 30
CAPACITY = 80 * 2**30


def _run_trial(name: str, config: TrialConfig, samples_per_s: float, *, configuration: str | None = None, repeat: int = 1,
               sequence: int | None = None, knobs: list[str] | None = None, loss_shift: float = 0.0, seed: int = 0,
               peak_fraction: float = 0.05, status: str = "ok") -> Trial:
    """One run as the real session records it: a 30-step window whose samples / wall time is ``samples_per_s``."""
    common = dict(name=name, configuration=configuration or name, repeat=repeat, sequence=sequence, config=config,
                  knobs=list(knobs or []), wall_time_s=1.0)
    if status != "ok":
        return Trial(status=status, error=f"{status}: simulated", **common)  # type: ignore[arg-type]
    samples = RUNS_STEPS * config.samples_per_step
    wall = samples / samples_per_s
    rng = random.Random(seed)
    jitter = [1 + rng.gauss(0, 0.01) for _ in range(RUNS_STEPS)]
    times = [wall * j / sum(jitter) for j in jitter]  # within-run jitter; the window's total is exact
    metrics = TrialMetrics(
        steps=RUNS_STEPS, warmup_steps=3, micro_batch_size=config.micro_batch_size, grad_accum_steps=config.grad_accum_steps,
        samples_per_step=config.samples_per_step, windows=[Window(steps=RUNS_STEPS, samples=samples, wall_s=wall)],
        samples_per_s=samples_per_s, wall_s=wall, data_wait_share=0.0, host_data_wait_share=0.0,
        step_times_s=times, step_data_wait_s=[0.0] * RUNS_STEPS, typical_step=summarize(times),
        losses=[2.0 - 0.01 * i + loss_shift for i in range(RUNS_STEPS)], first_grad_norm=1.0,
        peak_reserved_bytes=int(peak_fraction * CAPACITY * config.micro_batch_size / 8), device_memory_capacity_bytes=CAPACITY,
    )
    return Trial(status="ok", metrics=metrics, **common)  # type: ignore[arg-type]


StepTime = Callable[[TrialConfig], float]


class FakeSession:
    """Stands in for perfscope.trial.session.Session: no processes, exact about names, order and speeds.

    Like the real session it names the runs of one configuration cfg, cfg-r2, cfg-r3 ... and numbers every run
    in measurement order (``sequence``). A run's throughput is its configuration's true speed (samples per step
    / ``step_time``) × a seeded run-to-run noise factor (log-normal, ``noise``) × the machine's state at that
    point of the sequence (``drift``) × ``luck`` for chosen runs (configuration, repeat, config) -> factor.
    """

    def __init__(self, step_time: StepTime, *, noise: float = 0.01, seed: int = 0,
                 oom_above: int | Callable[[TrialConfig], int] | None = None,
                 loss_shift: Callable[[TrialConfig], float] = lambda c: 0.0,
                 drift: Callable[[int], float] = lambda sequence: 1.0,
                 luck: Callable[[str, int, TrialConfig], float] = lambda configuration, repeat, config: 1.0,
                 edit: Callable[[Trial], None] | None = None) -> None:
        self.step_time, self.noise, self.oom_above, self.loss_shift = step_time, noise, oom_above, loss_shift
        self.drift, self.luck, self.edit = drift, luck, edit
        self.rng = random.Random(seed)
        self.results = make_results([])
        self.calls: list[str] = []

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None) -> Trial:
        repeat = 1 + sum(1 for t in self.results.trials if t.configuration == configuration)
        name = configuration if repeat == 1 else f"{configuration}-r{repeat}"
        sequence = len(self.results.trials) + 1
        noise = math.exp(self.rng.gauss(0, self.noise))  # drawn for every run, failed ones too: the stream stays aligned
        limit = self.oom_above(config) if callable(self.oom_above) else self.oom_above
        common = dict(configuration=configuration, repeat=repeat, sequence=sequence, knobs=knobs, seed=sequence)
        if limit is not None and config.micro_batch_size > limit:
            trial = _run_trial(name, config, 1.0, status="oom", **common)  # type: ignore[arg-type]
        else:
            rate = (config.samples_per_step / self.step_time(config) * noise * self.drift(sequence)
                    * self.luck(configuration, repeat, config))
            trial = _run_trial(name, config, rate, loss_shift=self.loss_shift(config), **common)  # type: ignore[arg-type]
        if self.edit is not None:
            self.edit(trial)
        self.results.trials.append(trial)
        self.calls.append(name)
        return trial

    def config(self, name: str) -> TrialConfig:
        trial = self.results.trial(name)
        assert trial is not None, name
        return trial.config


def _step_time(factors: dict[str, float], micro_gain: float = 0.9) -> StepTime:
    """Step time = 0.1 s per 8 samples, divided by each active knob's factor; bigger micro-batches are a bit cheaper."""

    def step_time(c: TrialConfig) -> float:
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

    return step_time


def _run(ctx: KnobContext, session: FakeSession, **options) -> Sweeper:
    session.measure(BASELINE, ctx.base, [])  # as analyze does, before the sweep
    options.setdefault("order_seed", 0)  # the B/C order within pairs is random per sweep: fixed here
    sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(**options))
    sweeper.run()
    return sweeper


def _outcome(sweeper: Sweeper, knob_id: str):
    return next(o for o in sweeper.sweep.knobs if o.knob == knob_id)


def _codes(outcome) -> list[str]:
    """The codes of a knob outcome's reasons, in order."""
    return [m.code for m in outcome.reason]


def _said(outcome, code: str):
    """The outcome's reason of ``code`` (there must be exactly one)."""
    (found,) = [m for m in outcome.reason if m.code == code]
    return found


def _interleaved(session: FakeSession) -> None:
    """Every run after the first baseline run is one of a pair: a candidate and a baseline run, in either order."""
    trials = session.results.trials
    assert [t.sequence for t in trials] == list(range(1, len(trials) + 1))
    assert trials[0].configuration == BASELINE
    for one, other in zip(trials[1::2], trials[2::2]):
        assert sorted([one.configuration == BASELINE, other.configuration == BASELINE]) == [False, True], (one.name, other.name)
    assert len(trials) % 2 == 1  # the last candidate run has its baseline neighbour too


def test_the_fake_session_names_and_numbers_runs_like_the_real_one():
    session = FakeSession(_step_time({}))
    config = _ctx().base
    names = [session.measure(c, config, []).name for c in (BASELINE, "amp_bf16", BASELINE, "amp_bf16", BASELINE)]
    assert names == ["baseline", "amp_bf16", "baseline-r2", "amp_bf16-r2", "baseline-r3"]
    assert [t.sequence for t in session.results.trials] == [1, 2, 3, 4, 5]
    assert [t.repeat for t in session.results.runs("amp_bf16")] == [1, 2]
    rates = [t.metrics.samples_per_s for t in session.results.runs(BASELINE)]
    assert len(set(rates)) == 3 and all(rate == pytest.approx(80.0, rel=0.05) for rate in rates)  # 8 samples / 0.1 s, ±noise


def test_winners_stack_and_the_recommendation_is_remeasured():
    session = FakeSession(_step_time({"amp_bf16": 1.8, "compile": 1.3}))
    sweeper = _run(_ctx(), session, skip=["micro_batch"])
    sweep = sweeper.sweep
    assert sweep.recommended_trial == "stack2-compile"  # compile joined the bf16 stack
    assert sweep.recommended_knobs == ["amp_bf16", "compile"]
    assert sweep.recommended_gain.ratio == pytest.approx(1.8 * 1.3, rel=0.03)
    assert sweep.recommended_gain.faster and sweep.recommended_gain.runs >= 2
    # confirmed: new runs after the selection (the first traced) judge it, and only they (the winner's curse)
    stack_runs = session.results.runs("stack2-compile")
    traced = [i for i, r in enumerate(stack_runs) if r.config.capture_trace]
    assert len(traced) == 1 and traced[0] >= 1 and sweep.recommended_gain.runs == len(stack_runs) - traced[0]
    assert "gain_from_confirmation" in {n.code for n in sweep.notes}
    _interleaved(session)
    assert [o.knob for o in sweep.knobs[:2]] == ["amp_bf16", "compile"]  # ranked best-first
    assert _outcome(sweeper, "amp_bf16").gain.ratio == pytest.approx(1.8, rel=0.03)
    assert _outcome(sweeper, "amp_bf16").changes_semantics == [msg("numerics", change=msg("bf16_matmuls"))]
    assert sweep.noise is not None and sweep.noise.runs == len(session.results.runs(BASELINE))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_only_recommends_the_baseline_itself(seed):
    session = FakeSession(_step_time({}), seed=seed)
    sweeper = _run(_ctx(), session, skip=["micro_batch"])
    sweep = sweeper.sweep
    assert sweep.recommended_trial == "baseline" and sweep.recommended_knobs == [] and sweep.recommended_gain is None
    assert "no_knob_faster" in {n.code for n in sweep.notes}
    assert not any(o.gain and o.gain.faster for o in sweep.knobs)
    assert not any(sweeper.worthwhile(o.gain) for o in sweep.knobs)


def test_a_slower_knob_is_reported_as_a_slowdown_and_not_recommended():
    session = FakeSession(_step_time({"compile": 0.7, "amp_bf16": 1.5}))
    sweeper = _run(_ctx(), session, skip=["micro_batch"])
    compile_outcome = _outcome(sweeper, "compile")
    assert compile_outcome.status == "measured"
    assert compile_outcome.gain.verdict == "slower" and compile_outcome.gain.low <= 0.7 <= compile_outcome.gain.high
    assert compile_outcome.gain.ratio == pytest.approx(0.7, rel=0.05)
    assert compile_outcome.gain.runs == 4  # fewer runs never decide: a probable slowdown gets the runs that can (k − 1 df)
    assert "compile" not in sweeper.sweep.recommended_knobs
    assert sweeper.sweep.recommended_knobs == ["amp_bf16"]


def test_numerics_guard_rejects_a_fast_but_wrong_configuration():
    session = FakeSession(_step_time({"amp_fp16": 2.0, "amp_bf16": 1.5}), loss_shift=lambda c: 5.0 if c.precision == "fp16" else 0.0)
    sweeper = _run(_ctx(), session, skip=["micro_batch"])
    fp16 = _outcome(sweeper, "amp_fp16")
    assert fp16.status == "rejected" and _codes(fp16)[0] == "numerics_rejected"
    assert fp16.gain.ratio == pytest.approx(2.0, rel=0.03)  # faster, and still rejected
    assert sweeper.sweep.recommended_knobs == ["amp_bf16"] and sweeper.sweep.recommended_trial == "amp_bf16"


def test_oom_during_micro_batch_search_is_survived_and_checkpointing_is_paired():
    # without checkpointing micro-batch 32 fits and 64 does not; with it, 64 fits
    session = FakeSession(_step_time({}, micro_gain=0.8), oom_above=lambda c: 64 if c.activation_checkpointing else 32)
    sweeper = _run(_ctx(), session, only=["micro_batch", "activation_checkpointing"])
    points = {p.micro_batch_size: p.status for p in sweeper.sweep.micro_batch}
    assert points[8] == "ok" and points[16] == "ok" and points[32] == "ok" and points[64] == "oom"
    assert 32 < max(points) and any(32 < m < 64 for m in points)  # one bisection step between fit and OOM
    ckpt = _outcome(sweeper, "activation_checkpointing")
    assert ckpt.status == "measured" and ckpt.trial == "activation_checkpointing-mb64"
    assert _said(ckpt, "paired_micro_batch").params["micro"] == 64
    assert session.config("activation_checkpointing-mb64").activation_checkpointing
    micro = _outcome(sweeper, "micro_batch")
    assert micro.status == "measured" and micro.trial == "mb32" and [s.code for s in micro.changes_semantics] == ["global_batch"]
    # a global-batch change is never part of the recommendation
    assert "micro_batch" not in sweeper.sweep.recommended_knobs and sweeper.sweep.recommended_trial == "baseline"
    _interleaved(session)  # the search's runs (OOMs included) each have a baseline run beside them


def test_accumulation_keeps_the_global_batch_in_the_recommendation():
    session = FakeSession(_step_time({}, micro_gain=0.8))
    ctx = _ctx(grad_accum_steps=4)  # global batch 32 in micro-batches of 8
    sweeper = _run(ctx, session, only=["micro_batch", "grad_accum"])
    sweep = sweeper.sweep
    assert sweep.recommended_knobs == ["grad_accum"] and sweep.recommended_trial == "mb32"
    recommended = next(p for p in sweep.micro_batch if p.micro_batch_size == 32)
    assert recommended.grad_accum_steps == 1  # 32 × 1 = the user's 8 × 4
    assert _outcome(sweeper, "grad_accum").changes_semantics == []
    assert _outcome(sweeper, "grad_accum").trial == "mb32"
    rec_runs = session.results.runs("mb32")
    traced = [i for i, r in enumerate(rec_runs) if r.config.capture_trace]
    assert len(traced) == 1 and traced[0] >= 1  # the search's run(s), then confirmation runs (the first traced)
    assert all(r.config.samples_per_step == 32 and r.config.micro_batch_size == 32 for r in rec_runs)
    # the fastest point overall (micro-batch 128, one per step) changes the global batch: reported, flagged, not recommended
    micro = _outcome(sweeper, "micro_batch")
    assert micro.trial == "mb128" and micro.changes_semantics == [msg("global_batch", before=32, after=128)]


def test_budget_stops_new_trials():
    session = FakeSession(_step_time({"amp_bf16": 1.5}))
    ctx = _ctx()
    session.measure(BASELINE, ctx.base, [])
    clock = iter(range(0, 10_000, 10))
    sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(budget_s=25), elapsed=lambda: next(clock))
    sweep = sweeper.run()
    assert sweep.stopped_early == msg("budget_of_exhausted", budget_s=25)
    assert any(o.status == "skipped" and o.reason == [msg("sweep_stopped", why=sweep.stopped_early)]
               for o in sweep.knobs)
    assert len(session.calls) < 5
    _interleaved(session)  # the budget never splits a candidate run from its baseline neighbour


def test_unknown_knob_ids_are_a_user_error():
    with pytest.raises(UserError, match="unknown knob id.*valid ids: amp_bf16"):
        SweepOptions(only=["amp_bf17"])
    with pytest.raises(UserError, match="max_runs"):
        SweepOptions(max_runs=0)


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
    import perfscope.knobs
    import perfscope.search.sweep

    registry = [*REGISTRY, _SlowKnob()]
    monkeypatch.setattr(perfscope.search.sweep, "REGISTRY", registry)
    monkeypatch.setattr(perfscope.knobs, "REGISTRY", registry)

    def step_time(c: TrialConfig) -> float:
        return 0.1 * (1.4 if c.gc_mode == "disable" else 1.0)

    session = FakeSession(step_time)
    sweeper = _run(_ctx(), session, only=["fake_slow"])
    slow = _outcome(sweeper, "fake_slow")
    assert slow.status == "measured" and slow.gain.verdict == "slower"
    assert slow.gain.ratio == pytest.approx(1 / 1.4, rel=0.03) and slow.gain.high < 1.0  # reported as a slowdown
    assert sweeper.sweep.recommended_trial == "baseline" and sweeper.sweep.recommended_knobs == []
    assert sweeper.sweep.knobs[0].knob == "fake_slow"  # the only measured knob; the rest say why they were not tried
    assert all(o.status in ("skipped", "inapplicable") for o in sweeper.sweep.knobs[1:])


def test_stack_slower_than_its_parts_recommends_the_baseline():
    """Each knob wins alone, but together they interfere: the stack is slower, so it is not recommended."""

    def step_time(c: TrialConfig) -> float:
        if c.precision == "bf16" and c.compile == "default":
            return 0.15
        return 0.1 / (1.5 if c.precision == "bf16" or c.compile == "default" else 1.0)

    session = FakeSession(step_time)
    sweep = _run(_ctx(), session, only=["amp_bf16", "compile"]).sweep
    # the second knob did not join the stack (the stack's runs were slower); the one-knob recommendation is re-measured
    assert sweep.recommended_knobs in (["amp_bf16"], ["compile"])
    assert sweep.recommended_trial == sweep.recommended_knobs[0]
    assert sweep.recommended_gain.ratio == pytest.approx(1.5, rel=0.03) and sweep.recommended_gain.faster
    assert session.results.runs("stack2-amp_bf16") or session.results.runs("stack2-compile")  # the stack was measured

    # The re-measured runs of the recommendation (the traced one and the confirmation runs after it) come out slower
    # than the baseline: over its confirmation runs,
    # the configuration is not decidedly faster, so the baseline stays, and the disagreement is stated.
    remeasured: list[int] = []  # from the traced run on, the configuration runs slower than the baseline

    def luck(configuration: str, repeat: int, config: TrialConfig) -> float:
        if config.capture_trace or (remeasured and configuration == "amp_bf16"):
            remeasured.append(repeat)
            return (0.1 / 1.5) / 0.12
        return 1.0

    session = FakeSession(lambda c: 0.1 / (1.5 if c.precision == "bf16" else 1.0), luck=luck)
    sweep = _run(_ctx(), session, only=["amp_bf16"]).sweep
    assert any(r.config.capture_trace for r in session.results.runs("amp_bf16"))  # the recommendation was re-measured
    assert sweep.recommended_trial == "baseline" and sweep.recommended_knobs == [] and sweep.recommended_gain is None
    assert {"stack_not_confirmed", "earlier_gain_not_confirmed"} <= {n.code for n in sweep.notes}


def test_worker_options_are_measured_on_top_of_workers_and_stack_after_them():
    def step_time(c: TrialConfig) -> float:
        t = 0.2 / (1.6 if c.num_workers >= 8 else 1.3 if c.num_workers > 0 else 1.0)
        return t / (1.2 if c.persistent_workers else 1.0)

    session = FakeSession(step_time)
    sweeper = _run(_ctx(dataset=True), session, only=["dataloader_workers", "persistent_workers", "prefetch_factor"])
    workers, persistent = _outcome(sweeper, "dataloader_workers"), _outcome(sweeper, "persistent_workers")
    prefetch = _outcome(sweeper, "prefetch_factor")
    assert workers.gain.ratio == pytest.approx(1.6, rel=0.03) and workers.gain.reference == BASELINE
    # a knob measured on top of another is judged by its increment over it
    assert persistent.gain.ratio == pytest.approx(1.2, rel=0.03) and persistent.gain.faster
    assert persistent.gain.reference == "dataloader_workers"
    assert _said(persistent, "measured_on_top").params["reference"] == "dataloader_workers"
    persistent_config = session.config("persistent_workers")
    assert persistent_config.num_workers == 8 and persistent_config.persistent_workers
    assert prefetch.gain.reference == "dataloader_workers" and not prefetch.gain.significant  # adds nothing to the workers
    assert prefetch.gain.ratio == pytest.approx(1.0, abs=0.03)
    assert sweeper.sweep.recommended_knobs == ["dataloader_workers", "persistent_workers"]


def test_worker_options_without_workers_to_build_on_are_skipped():
    session = FakeSession(_step_time({}))
    sweeper = _run(_ctx(dataset=True), session, only=["persistent_workers"])
    assert _outcome(sweeper, "persistent_workers").status == "skipped"
    assert _outcome(sweeper, "persistent_workers").reason == [msg("needs_prerequisite", prerequisite="dataloader_workers")]
    assert session.calls == ["baseline"]


def test_micro_batch_is_re_searched_when_the_stack_frees_memory():
    """fp32 fits micro-batch 16; bf16 halves activations and fits 32: the stack re-searches and takes 32."""

    def fits(c: TrialConfig) -> int:
        return 32 if c.precision == "bf16" else 16

    session = FakeSession(_step_time({"amp_bf16": 1.5}, micro_gain=0.8), oom_above=fits)
    sweeper = _run(_ctx(grad_accum_steps=8), session, only=["amp_bf16", "grad_accum"])  # global batch 64
    sweep = sweeper.sweep
    assert {p.micro_batch_size: p.status for p in sweep.micro_batch}[32] == "oom"
    assert any(name.startswith("stack-mb") for name in session.calls)
    assert sweep.recommended_knobs == ["amp_bf16", "grad_accum"]
    rec = session.results.runs(sweep.recommended_trial)[-1].config
    assert (rec.precision, rec.micro_batch_size, rec.grad_accum_steps) == ("bf16", 32, 2)
    assert "micro_batch_researched" in {n.code for n in sweep.notes}


def test_numerics_guard_with_a_different_micro_batch():
    from perfscope.search.numerics import compare_numerics

    base_cfg = TrialConfig(micro_batch_size=8, grad_accum_steps=4)
    base = _run_trial("baseline", base_cfg, 80.0)
    split = base_cfg.replace(micro_batch_size=32, grad_accum_steps=1)
    # other samples per step (losses differ step by step by 3%) but the same level: accepted
    ok = _run_trial("mb32", split, 100.0, loss_shift=0.03)
    assert compare_numerics(base, ok).ok
    # an accumulation-scale error: gradients ×4 with the same global batch
    wrong = _run_trial("mb32", split, 100.0)
    wrong.metrics.first_grad_norm = 4.0
    verdict = compare_numerics(base, wrong)
    assert not verdict.ok and verdict.reason is not None and verdict.reason.code == "numerics_accumulation_grad_norm"
    # a diverging loss level: rejected whatever the batch
    diverged = _run_trial("mb64", base_cfg.replace(micro_batch_size=64, grad_accum_steps=1), 100.0, loss_shift=1.0)
    assert not compare_numerics(base, diverged).ok
    # a larger global batch that trains faster per update (a lower loss after the same updates): no fault
    learns_faster = _run_trial("mb64", base_cfg.replace(micro_batch_size=64, grad_accum_steps=1), 100.0, loss_shift=-0.2)
    assert compare_numerics(base, learns_faster).ok
    # ... but a smaller global batch is held to the level both ways
    smaller = _run_trial("mb4", base_cfg.replace(micro_batch_size=4, grad_accum_steps=1), 100.0, loss_shift=-0.2)
    assert not compare_numerics(base, smaller).ok
    # the same micro-batch: step-by-step at 2% (fp32)
    assert not compare_numerics(base, _run_trial("x", base_cfg, 80.0, loss_shift=0.1)).ok
    assert compare_numerics(base, _run_trial("x", base_cfg.replace(precision="bf16"), 80.0, loss_shift=0.1)).ok


def test_non_finite_loss_is_rejected():
    def overflow(trial: Trial) -> None:
        if trial.ok and trial.config.precision == "fp16":
            trial.metrics.losses[5] = None

    session = FakeSession(_step_time({"amp_fp16": 2.0}), edit=overflow)
    sweep = _run(_ctx(), session, only=["amp_fp16"]).sweep
    fp16 = next(o for o in sweep.knobs if o.knob == "amp_fp16")
    assert fp16.status == "rejected" and fp16.reason[0].params["reason"] == msg("numerics_nonfinite")
    assert sweep.recommended_knobs == [] and sweep.recommended_trial == "baseline"


# ----------------------------------------------------------- runs as evidence: luck, drift, repetition


def test_a_candidate_whose_later_runs_are_all_contended_stops_at_max_runs():
    """The load arrives after a candidate's first run: every later run is excluded (the session measured it again
    and the load was still there), so its evidence stays one run, undecided. --max-runs caps its measurements, not
    its evidence runs, or refinement never ends."""
    def contended(trial: Trial) -> None:
        if trial.configuration == "amp_bf16" and trial.repeat > 1:
            trial.excluded = msg("contended", why=[load(1.5)], runs=3)
        assert len(session.results.trials) < 200, "refinement did not stop"

    session = FakeSession(_step_time({"amp_bf16": 1.5}), edit=contended)
    sweeper = _run(_ctx(), session, only=["amp_bf16"], max_runs=4)
    runs = [t for t in session.results.trials if t.configuration == "amp_bf16"]
    assert len(runs) == 4 and sweeper.measurements["amp_bf16"] == 4
    outcome = _outcome(sweeper, "amp_bf16")
    assert outcome.gain is None or not outcome.gain.faster  # no evidence, no win
    assert "amp_bf16" not in sweeper.sweep.recommended_knobs



@pytest.mark.parametrize("seed", [0, 2, 3])
def test_a_lucky_first_run_is_not_a_win_once_refined(seed):
    """compile's true speed is the baseline's, but its first process ran 8% fast (a clock boost, a quiet
    neighbour): one run against the baseline's would make it a win. On a machine whose runs vary about 1%,
    with a long, quiet baseline series, that first look even says "faster"; more runs must undo it, and the
    lucky run must not hide behind the baseline's quiet series once they are pooled."""

    def luck(configuration: str, repeat: int, config: TrialConfig) -> float:
        return 1.08 if (configuration, repeat) == ("compile", 1) else 1.0

    session = FakeSession(_step_time({"amp_bf16": 1.5}), luck=luck, seed=seed)
    sweeper = _run(_ctx(), session, skip=["micro_batch"])
    first = session.results.trial("compile")
    before = next(t for t in session.results.trials if t.configuration == BASELINE and t.sequence == first.sequence - 1)
    assert first.metrics.samples_per_s / before.metrics.samples_per_s > 1.05  # what a single-run comparison sees
    compile_outcome = _outcome(sweeper, "compile")
    assert compile_outcome.gain.runs > 1  # the first look was not the last
    assert compile_outcome.gain.verdict != "faster"
    assert compile_outcome.gain.ratio < 1.06
    assert sweeper.sweep.recommended_knobs == ["amp_bf16"]


def test_a_decided_gain_below_min_gain_is_not_recommended():
    """A quiet machine (0.2% between runs) decides that fused AdamW is 1% faster: true, and not worth a code
    change (min_gain 2%), so the baseline stays; with min_gain 0.5% it is the recommendation."""
    session = FakeSession(_step_time({"fused_optimizer": 1.01}), noise=0.002)
    sweeper = _run(_ctx(), session, only=["fused_optimizer"])
    fused = _outcome(sweeper, "fused_optimizer")
    # decided, or left undecided because more runs could not make a sub-2% gain worthwhile (futility stop)
    assert fused.gain.verdict in ("faster", "undecided") and fused.gain.ratio == pytest.approx(1.01, abs=0.003)
    assert sweeper.sweep.recommended_trial == "baseline" and sweeper.sweep.recommended_knobs == []

    session = FakeSession(_step_time({"fused_optimizer": 1.01}), noise=0.002)
    sweeper = _run(_ctx(), session, only=["fused_optimizer"], min_gain=0.005)
    assert sweeper.sweep.recommended_knobs == ["fused_optimizer"] and sweeper.sweep.recommended_gain.faster


@pytest.mark.parametrize("drift", ["first process slow", "machine warming up"])
def test_baseline_drift_does_not_make_the_first_candidate_look_faster(drift):
    """The machine's speed changes over the sweep: the first process 30% slower than the rest, or a slow climb
    back to full speed over 30 runs. amp_bf16, measured first, is no faster than the baseline; compile is 1.3×.
    Compared with the first baseline run, amp_bf16 would look faster (1.4× when that process was slow);
    compared with the baseline runs beside it in time (interleaving), it does not, and compile's gain is still found."""
    machine = {
        "first process slow": lambda sequence: 0.7 if sequence == 1 else 1.0,
        "machine warming up": lambda sequence: 0.7 + 0.3 * min(sequence, 30) / 30,
    }[drift]
    session = FakeSession(_step_time({"compile": 1.3}), drift=machine)
    sweeper = _run(_ctx(), session, only=["amp_bf16", "compile"])
    first_baseline, first_candidate = session.results.trials[:2]
    assert first_candidate.configuration == "amp_bf16"
    # the trap: against the first baseline run (the old design's one reference), amp_bf16's runs look faster
    amp_runs = session.results.runs("amp_bf16")
    assert len(amp_runs) > 1
    assert statistics.geometric_mean(r.metrics.samples_per_s / first_baseline.metrics.samples_per_s for r in amp_runs) > 1.03
    amp = _outcome(sweeper, "amp_bf16")
    assert amp.gain.verdict != "faster" and amp.gain.low < 1.0
    compile_outcome = _outcome(sweeper, "compile")
    assert compile_outcome.gain.faster and compile_outcome.gain.ratio == pytest.approx(1.3, rel=0.05)
    assert sweeper.sweep.recommended_knobs == ["compile"]
    _interleaved(session)


@pytest.mark.parametrize("max_runs", [1, 2, 5])
def test_refine_stops_at_max_runs(max_runs):
    """A noisy machine (5% between runs) and knobs that change nothing: the comparisons stay undecided, so the
    candidates get more runs, each with its baseline neighbour, and stop at max_runs."""
    session = FakeSession(_step_time({}), noise=0.05)
    sweeper = _run(_ctx(), session, skip=["micro_batch"], max_runs=max_runs)
    measured = [o for o in sweeper.sweep.knobs if o.status == "measured"]
    assert len(measured) >= 5
    for outcome in measured:  # each outcome's gain is judged from the runs refine left it with
        assert outcome.gain.runs <= max_runs, outcome.knob
        if could_still_win(outcome.gain, sweeper.options.min_gain, max_runs) and not sweeper.family.futile(outcome.trial):
            assert outcome.gain.runs == max_runs, outcome.knob  # still open: only max_runs stopped it
    undecided = [o for o in measured if o.gain.verdict == "undecided"]
    assert len(undecided) >= len(measured) - 1
    assert all("cannot_tell" in _codes(o) for o in undecided)
    if max_runs > 1:
        assert any(o.gain.runs > 1 for o in measured)  # refine did add runs (and stopped where more were futile)
    candidate_runs = [t for t in session.results.trials if t.configuration != BASELINE]
    assert len(session.results.runs(BASELINE)) == 1 + len(candidate_runs)
    _interleaved(session)


def test_refine_adds_runs_to_the_most_promising_undecided_candidate_first():
    """compile is a real but small gain (4%), tf32 nothing: on a 1%-noise machine both start undecided."""
    session = FakeSession(_step_time({"compile": 1.04}))
    sweeper = _run(_ctx(), session, only=["tf32", "compile"], max_runs=6)
    compile_outcome, tf32 = _outcome(sweeper, "compile"), _outcome(sweeper, "tf32")
    assert compile_outcome.gain.faster and compile_outcome.gain.low <= 1.04 <= compile_outcome.gain.high
    assert compile_outcome.gain.runs >= 2  # a 4% win is not clear after one run
    assert not sweeper.worthwhile(tf32.gain) and tf32.gain.runs <= 6
    refined = [t.configuration for t in session.results.trials[5:] if t.configuration != BASELINE]
    assert refined and refined[0] == "compile"  # the higher interval goes first


def check_real_sweep(results, out) -> None:
    """What a real sweep of amp_bf16 and gc_freeze must do on any machine, quiet or loaded.

    Not its verdicts: whether bf16 is faster here, or whether any run was quiet enough to be evidence, is
    the machine's to decide (on the loaded 2-core machine every run was contended, so no knob had a gain).
    What load cannot move: every run ends in a recorded status; a contended run is never evidence, and is
    measured again at once or named in a warning; a knob has a gain exactly when both it and the baseline
    have evidence runs; the recommendation is the baseline or measured faster; the report renders.
    """
    sweep = results.sweep
    names = {t.name for t in results.trials}
    assert {"baseline", "baseline-r2", "amp_bf16", "gc_freeze"} <= names  # the baseline re-measured beside each candidate
    for t in results.trials:
        assert t.status in ("ok", "oom", "error", "crashed", "timeout", "nonfinite", "skipped"), (t.name, t.status)
        assert t.status != "ok" or t.metrics is not None, t.name
        if t.metrics is not None and t.metrics.contention:
            assert t.contended, (t.name, t.excluded)  # never evidence
    by_sequence = sorted(results.trials, key=lambda t: t.sequence)
    for t, after in zip(by_sequence, [*by_sequence[1:], None]):
        if t.contended:
            remeasured = after is not None and after.configuration == t.configuration and after.repeat == t.repeat + 1
            named = any(t.configuration in w.params.get("spoiled", {}) for w in results.warnings)
            refused = t.excluded.params.get("budget", False)  # the budget, not the load
            persisted = bool({"runs", "gave_up_after"} & set(t.excluded.params))
            assert remeasured or (persisted and named) or refused, (t.name, t.excluded, results.warnings)
    assert sweep.recommended_trial in names
    assert sweep.recommended_trial == "baseline" or sweep.recommended_gain.faster
    by_id = {o.knob: o for o in sweep.knobs}
    for knob in ("amp_bf16", "gc_freeze"):
        outcome = by_id[knob]
        assert outcome.status in ("measured", "rejected") and outcome.trial == knob, outcome
        evidence = bool(results.runs(knob)) and bool(results.runs("baseline"))
        assert (outcome.gain is not None) == evidence, (knob, outcome.gain, [(t.name, t.excluded) for t in results.trials])
    assert by_id["tf32"].status == "inapplicable" and by_id["compile"].status == "skipped"
    report = (out / "report.html").read_text()
    assert "bf16 autocast" in report
    for warning in results.warnings:  # the contended runs are labelled where the reader looks
        said = words(warning)
        assert said.split(":")[0] in report


@pytest.mark.slow
def test_real_sweep_on_the_tiny_example(tmp_path):
    """End to end: real trial processes; the sweep section is written and consistent with the trials."""
    from pathlib import Path

    from perfscope.cli import main
    from perfscope.results import Results

    example = Path(__file__).parent.parent / "examples" / "tiny_transformer.py"
    # what the sweep does, not what a budget cuts; 3 runs a candidate at most: check_real_sweep holds for any verdict
    code = main(["analyze", str(example), "--device", "cpu", "--out", str(tmp_path), "--steps", "8", "--warmup", "2",
                 "--only", "amp_bf16,gc_freeze", "--no-trace", "--no-budget", "--max-runs", "3"])
    assert code == 0
    check_real_sweep(Results.load(tmp_path / "results.json"), tmp_path)


@pytest.mark.slow
def test_real_oom_during_the_micro_batch_search_is_survived(tmp_path):
    """Real trial processes on a workload that raises torch.OutOfMemoryError above micro-batch 16."""
    from pathlib import Path

    from perfscope.cli import main
    from perfscope.results import Results

    workload = Path(__file__).parent / "workloads" / "sweep_oom.py"
    code = main(["analyze", str(workload), "--device", "cpu", "--out", str(tmp_path), "--steps", "6", "--warmup", "1",
                 "--only", "grad_accum,micro_batch,activation_checkpointing", "--no-trace", "--no-budget", "--max-runs", "3"])
    assert code == 0
    results = Results.load(tmp_path / "results.json")
    sweep = results.sweep
    points = {p.micro_batch_size: p for p in sweep.micro_batch}
    assert 32 in points, {o.knob: o.reason for o in sweep.knobs}  # why the search stopped short
    assert points[8].status == "ok" and points[16].status == "ok" and points[32].status == "oom"
    assert points[16].grad_accum_steps == 2  # 16 × 2 keeps the user's global batch of 8 × 4
    assert results.trial("mb32").status == "oom"
    by_id = {o.knob: o for o in sweep.knobs}
    assert by_id["micro_batch"].status == "measured" and by_id["grad_accum"].status == "measured"
    assert by_id["activation_checkpointing"].status in ("measured", "rejected")  # CPU: tried alone
    # never below the baseline: either a significant win or the baseline itself
    assert sweep.recommended_trial == "baseline" or sweep.recommended_gain.faster


# ------------------------------------------------------------------------------ memory and recipe levers


def test_a_contended_run_decides_no_plateau_of_the_micro_batch_search():
    """Micro-batch 16's run measured a neighbour's load (excluded) and read slower than 8's: the search goes on to
    the OOM at 32. The same slower reading on an evidence run stops it there."""
    def measure_with(excluded: str | None):
        def measure(name: str, config: TrialConfig, knobs: list[str]) -> Trial:
            micro = config.micro_batch_size
            if micro > 16:
                return make_trial(name, status="oom", batch=micro)
            trial = make_trial(name, median_s=0.1 * micro / 8 * 1.2, batch=micro)  # 16: 1.2× slower per sample
            trial.excluded = excluded
            return trial
        return measure

    base = TrialConfig(device="cpu", micro_batch_size=8, grad_accum_steps=4)
    contended = search_micro_batch(measure_with("contended: other processes used 1.5 cores"), base, make_trial(batch=8))
    assert contended.hit_oom and [p.micro_batch_size for p in contended.points] == [8, 16, 24, 32]  # 24: the bisection
    quiet = search_micro_batch(measure_with(None), base, make_trial(batch=8))
    assert not quiet.hit_oom and quiet.stopped == msg("micro_batch_plateau", micro=16)


def test_lean_optimizer_is_measured_alone_and_paired_with_the_micro_batch_its_memory_unlocks():
    # Without a lean optimizer micro-batch 32 fits and 48 does not; Adafactor frees enough for 48.
    session = FakeSession(_step_time({}, micro_gain=0.8), oom_above=lambda c: 48 if c.optimizer == "adafactor" else 32)
    sweeper = _run(_ctx(), session, only=["micro_batch", "adafactor"])
    assert {p.micro_batch_size: p.status for p in sweeper.sweep.micro_batch}[48] == "oom"  # the search's bisection point
    alone, paired = session.config("adafactor"), session.config("adafactor-mb48")
    assert alone.optimizer == paired.optimizer == "adafactor"
    assert alone.micro_batch_size == 8 and paired.micro_batch_size == 48  # the first micro-batch that did not fit
    outcome = _outcome(sweeper, "adafactor")
    assert outcome.status == "measured" and outcome.trial == "adafactor-mb48"  # the faster of the two
    assert _said(outcome, "paired_micro_batch") == msg("paired_micro_batch", micro=48, largest=32, oom=48)
    assert _said(outcome, "fastest_of_variants").params["count"] == 2
    assert [(s.code, s.params.get("replacement")) for s in outcome.changes_semantics][0] == ("training_recipe", "Adafactor")
    assert msg("global_batch", before=8, after=48) in outcome.changes_semantics
    _interleaved(session)


def test_a_faster_recipe_change_is_reported_but_never_recommended():
    session = FakeSession(lambda c: 0.1 / (2.0 if c.optimizer == "adafactor" else 1.0))
    sweeper = _run(_ctx(device="cpu"), session, only=["adafactor", "gc_freeze"])
    outcome = _outcome(sweeper, "adafactor")
    assert outcome.status == "measured" and outcome.gain.faster and outcome.gain.ratio == pytest.approx(2.0, rel=0.03)
    assert "recipe_not_stacked" in _codes(outcome)
    assert sweeper.sweep.recommended_trial == BASELINE and "adafactor" not in sweeper.sweep.recommended_knobs
    assert "adafactor-mb" not in " ".join(session.calls)  # CPU: no memory wall, no pairing


def test_an_optimizer_that_trains_worse_over_the_steps_is_rejected_but_one_that_differs_is_not():
    worse = FakeSession(_step_time({}), loss_shift=lambda c: 0.2 if c.optimizer == "adafactor" else 0.0)  # mean loss 10% up
    outcome = _outcome(_run(_ctx(device="cpu"), worse, only=["adafactor"]), "adafactor")
    assert outcome.status == "rejected" and outcome.reason[0].params["reason"].code == "numerics_recipe_loss"
    better = FakeSession(_step_time({}), loss_shift=lambda c: -0.2 if c.optimizer == "adafactor" else 0.0)
    assert _outcome(_run(_ctx(device="cpu"), better, only=["adafactor"]), "adafactor").status == "measured"


def test_offloading_is_paired_like_checkpointing_and_its_first_run_is_traced():
    session = FakeSession(_step_time({}, micro_gain=0.8), oom_above=lambda c: 64 if c.offload_activations else 32)
    sweeper = _run(_ctx(), session, only=["micro_batch", "activation_offloading"])
    outcome = _outcome(sweeper, "activation_offloading")
    assert outcome.trial == "activation_offloading-mb64" and _said(outcome, "paired_micro_batch").params["micro"] == 64
    runs = session.results.runs("activation_offloading-mb64")
    assert runs[0].config.capture_trace and runs[0].config.offload_activations  # the copies are read from its trace
    assert all(not r.config.capture_trace for r in runs[1:])
    assert "host↔device copy traffic unknown" in _said(outcome, "knob_note").params["note"]  # the fake runs: no trace facts


def test_activation_knobs_are_skipped_on_a_gpu_where_memory_does_not_limit():
    sweeper = _run(_ctx(), FakeSession(_step_time({}, micro_gain=0.8)), only=["micro_batch", "activation_offloading", "adafactor"])
    offload = _outcome(sweeper, "activation_offloading")
    assert offload.status == "skipped" and _said(offload, "memory_not_limiting").params["cost"] == "host↔device copies"
    assert _outcome(sweeper, "adafactor").trial == "adafactor"  # measured alone only: nothing to unlock


def test_ddp_settings_never_stack_onto_fsdp2():
    """FSDP2 wins, a DDP bucket size wins too on DDP, and FSDP2's mixed precision wins on top of FSDP2: the stack
    is FSDP2 + its mixed precision; the bucket size, a DDP setting, is left out (applied to an FSDP2 config it
    would be an invalid TrialConfig)."""
    def step_time(c: TrialConfig) -> float:
        t = 0.2 / (1.5 if c.data_parallel == "fsdp" else 1.0) / (1.3 if c.bucket_cap_mb == 100.0 else 1.0)
        return t / (1.2 if c.fsdp_mixed_precision else 1.0)

    session = FakeSession(step_time)
    ctx = _ctx(nproc_per_node=2, data_parallel="ddp")
    sweeper = _run(ctx, session, only=["fsdp2", "fsdp_mixed_precision", "ddp_bucket_cap"])
    assert _outcome(sweeper, "ddp_bucket_cap").gain.faster and _outcome(sweeper, "fsdp2").gain.faster
    assert _outcome(sweeper, "fsdp_mixed_precision").gain.reference.startswith("fsdp2")  # its best variant
    assert sweeper.sweep.recommended_knobs == ["fsdp2", "fsdp_mixed_precision"]
    recommended = session.config(sweeper.sweep.recommended_trial)
    assert recommended.data_parallel == "fsdp" and recommended.bucket_cap_mb is None


def _crash_when_stacked(trial: Trial) -> None:
    """TF32 + compile raising in inductor (pytorch#166387): each alone runs, the two together crash."""
    if trial.config.tf32 and trial.config.compile == "default":
        trial.status, trial.metrics = "crashed", None  # type: ignore[assignment]
        trial.error = ("torch._dynamo.exc.BackendCompilerFailed: RuntimeError: PyTorch is checking whether allow_tf32_new "
                       "is enabled for cuBlas matmul\nTraceback (most recent call last): ...")


def test_a_stack_that_fails_is_reported_with_its_reason_never_silently_dropped():
    session = FakeSession(_step_time({"tf32": 1.6, "compile": 1.3}), edit=_crash_when_stacked)
    sweeper = _run(_ctx(), session, only=["tf32", "compile"])
    sweep, results = sweeper.sweep, session.results
    failed = [t for t in results.trials if t.status == "crashed"]
    assert [t.configuration for t in failed] == ["stack2-compile"]  # the failed run is kept: the report lists it
    assert sweep.recommended_knobs == ["tf32"] and sweep.recommended_trial == "tf32"  # measured without compile
    (note,) = [n for n in sweep.notes if n.code == "stack_not_joined"]
    assert note.params["knobs"] == ["tf32", "compile"] and note.params["name"] == "stack2-compile" and note.params["failed"]
    assert "BackendCompilerFailed" in note.params["reason"].params["error"] and note.params["joining"] == "compile"
    compile_outcome = _outcome(sweeper, "compile")
    assert compile_outcome.status == "measured" and compile_outcome.gain.faster  # alone it wins ...
    joined = _said(compile_outcome, "did_not_join_stack")  # ... and why not
    assert joined.params["name"] == "stack2-compile" and joined.params["failed"]
    assert joined.params["reason"].code == "run_failed" and joined.params["reason"].params["status"] == "crashed"
    (warning,) = results.warnings
    assert warning.code == "stack_failed" and warning.params["knobs"] == ["tf32", "compile"]
    assert warning.params["joining"] == "compile" and warning.params["trial"] == "stack2-compile"


def test_a_stack_the_numerics_guard_rejects_is_a_note_not_a_warning():
    session = FakeSession(_step_time({"tf32": 1.6, "compile": 1.3}),
                          loss_shift=lambda c: 5.0 if c.tf32 and c.compile == "default" else 0.0)
    sweeper = _run(_ctx(), session, only=["tf32", "compile"])
    assert sweeper.sweep.recommended_knobs == ["tf32"]
    (note,) = [n for n in sweeper.sweep.notes if n.code == "stack_not_joined"]
    assert note.params["name"] == "stack2-compile" and not note.params["failed"]
    assert note.params["reason"].code == "numerics_rejected"
    assert not _said(_outcome(sweeper, "compile"), "did_not_join_stack").params["failed"]
    assert session.results.warnings == []

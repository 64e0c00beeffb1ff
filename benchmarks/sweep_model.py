"""Simulated sweeps: the error rates of the sweep's real decision code under known truths.

    model = NOISE_MODELS["cpu"]
    outcome = simulate_sweep(model, effects=[0.0] * 20, seed=7)    # SweepOutcome(false=0, found=0, ...)

Why. Real A/A experiments on this machine cost ~2 s a run and bound a false-alarm rate only below 10-35%;
a stated rate needs thousands of decisions. Here synthetic run throughputs (log-rate noise drawn from a
`NoiseModel`) feed the product's own code, not a copy: the sweep's `Sweeper.measure` (the random order within
pairs), `judge` (perfscope.search.compare's Welch test, perfscope.search.family's Holm and look split),
`refine` (adaptive repetition) and `recommend` (stacking and the confirmation runs). The CI gate is simulated
on its own path, run_gate, by benchmarks/gate_simulation.py.

A simulated sweep: one baseline run, then each of ``len(effects)`` knobs once (interleaved with the baseline),
refinement, and the recommendation. Knob i multiplies throughput by 1 + effects[i]; a stack by the product.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from perfscope.knobs import Knob, KnobContext, ModelFacts
from perfscope.results import Environment, Results, Trial, TrialMetrics, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.search.sweep import BASELINE, Candidate, Sweeper, SweepOptions
from perfscope.workload import Workload


@dataclass(frozen=True)
class NoiseModel:
    """How a run's log throughput varies: Gaussian (or Student-t) run-to-run noise, a random-walk drift, bursts
    that slow single runs, a bimodal per-process slow mode, and candidates noisier than the baseline."""

    name: str
    sigma: float = 0.036
    """Run-to-run standard deviation of log throughput."""
    drift: float = 0.0
    """Standard deviation of the machine's random-walk step per run (log)."""
    burst_p: float = 0.0
    burst: float = 0.0
    """A run is slowed by ``burst`` (log) with probability ``burst_p`` (a neighbour the contention guard missed)."""
    bimodal_p: float = 0.0
    bimodal: float = 0.0
    """A process lands in a slow mode (the allocator lottery) with probability ``bimodal_p``, ``bimodal`` slower."""
    candidate_scale: float = 1.0
    """Candidates' run-to-run spread over the baseline's (autotuned kernels, more threads)."""
    tail_df: float | None = None
    """Student-t run noise with these degrees of freedom (scaled to ``sigma``): heavy tails."""

    def noise(self, rng: random.Random, *, candidate: bool) -> float:
        scale = self.sigma * (self.candidate_scale if candidate else 1.0)
        if self.tail_df is None:
            eps = rng.gauss(0.0, 1.0)
        else:  # t = z / sqrt(chi2/df), scaled to unit variance
            chi2 = rng.gammavariate(self.tail_df / 2, 2.0)
            eps = rng.gauss(0.0, 1.0) / math.sqrt(chi2 / self.tail_df) * math.sqrt((self.tail_df - 2) / self.tail_df)
        value = scale * eps
        if rng.random() < self.burst_p:
            value -= self.burst
        if rng.random() < self.bimodal_p:
            value -= self.bimodal
        return value


NOISE_MODELS: dict[str, NoiseModel] = {m.name: m for m in (
    # sigma from benchmarks/results/sweep_cpu.txt: 19 baseline runs of the tiny transformer on the 2-core VM,
    # successive-difference sigma 3.6% (the sweep's own figure), with the slow wander of those runs (434 -> 370 ->
    # 450 samples/s) as a 1%-per-run random walk.
    NoiseModel("cpu", sigma=0.036, drift=0.01),
    NoiseModel("drift", sigma=0.036, drift=0.03),
    NoiseModel("bursts", sigma=0.036, drift=0.01, burst_p=0.10, burst=0.20),
    NoiseModel("bimodal", sigma=0.036, drift=0.01, bimodal_p=0.25, bimodal=0.25),
    NoiseModel("unequal", sigma=0.036, drift=0.01, candidate_scale=3.0),
    NoiseModel("heavy_tails", sigma=0.036, drift=0.01, tail_df=3.0),
)}


class SimKnob(Knob):
    """A knob whose only change is a marker: its effect lives in the simulated session."""

    title = "simulated knob"

    def __init__(self, index: int) -> None:
        self.id = f"k{index:02d}"  # type: ignore[misc]

    def code_change(self, ctx: KnobContext) -> str | None:
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{self.id: True}]

    def apply(self, config: TrialConfig, changes: dict[str, Any]) -> TrialConfig:
        return config  # the session knows each run's knobs; TrialConfig has no field for a simulated one


def _results() -> Results:
    return Results(environment=Environment(device_type="cpu", device_name="simulated", cpu_cores_logical=2),
                   workload=WorkloadInfo(path="simulated.py", sha256="0" * 64, name="simulated"))


def _trial(name: str, configuration: str, repeat: int, sequence: int, config: TrialConfig, knobs: list[str],
           rate: float) -> Trial:
    metrics = TrialMetrics(steps=10, warmup_steps=1, micro_batch_size=config.micro_batch_size,
                           grad_accum_steps=config.grad_accum_steps, samples_per_step=config.samples_per_step,
                           windows=[], samples_per_s=rate, wall_s=10 * config.samples_per_step / rate,
                           data_wait_share=0.0, host_data_wait_share=0.0)
    return Trial(name=name, configuration=configuration, repeat=repeat, sequence=sequence, config=config,
                 status="ok", knobs=list(knobs), metrics=metrics, wall_time_s=1.0)


class SimSession:
    """Stands in for perfscope.trial.session.Session: a run's rate is 100 samples/s × the true effect of its knobs
    × exp(drift + noise), named and numbered as the real session does."""

    def __init__(self, model: NoiseModel, effects: dict[str, float], rng: random.Random) -> None:
        self.model, self.effects, self.rng = model, effects, rng
        self.results = _results()
        self.level = 0.0
        self.counts: dict[str, int] = {}

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None) -> Trial:
        knobs = list(knobs or [])
        self.level += self.rng.gauss(0.0, self.model.drift) if self.model.drift else 0.0
        truth = sum(math.log1p(self.effects.get(k, 0.0)) for k in knobs)
        rate = 100.0 * math.exp(truth + self.level + self.model.noise(self.rng, candidate=configuration != BASELINE))
        repeat = self.counts[configuration] = self.counts.get(configuration, 0) + 1
        name = configuration if repeat == 1 else f"{configuration}-r{repeat}"
        trial = _trial(name, configuration, repeat, len(self.results.trials) + 1, config, knobs, rate)
        self.results.trials.append(trial)
        return trial


@dataclass(frozen=True)
class SweepOutcome:
    """What one simulated sweep decided, against the truth."""

    false_discoveries: int
    """No-effect knobs called faster or slower (family-wise: any > 0 is an error)."""
    false_faster: int
    found: int
    """Knobs with an effect called faster."""
    effective: int
    recommended: tuple[str, ...]
    recommended_false: bool
    """A configuration recommended although none of its knobs has an effect."""
    runs: int
    reported_gain: float | None = None
    """The recommendation's reported gain (from its confirmation runs); None when the baseline is recommended."""
    true_gain: float | None = None
    """The recommended knobs' true gain: the product of their effects."""
    confirmation_runs: int = 0
    """The runs behind the reported gain."""


def _context() -> KnobContext:
    workload = Workload(model=lambda: None, loss=lambda m, b: None, batches=lambda n: [], batch_size=8)
    return KnobContext(workload=workload, base=TrialConfig(device="cpu", micro_batch_size=8),
                       environment=Environment(device_type="cpu", device_name="simulated", cpu_cores_logical=2),
                       model=ModelFacts(parameter_count=1000, has_conv2d=False, repeated_blocks=2, optimizer_class="AdamW"))


def simulate_sweep(model: NoiseModel, effects: list[float], *, seed: int, max_runs: int = 4,
                   recommend: bool = True) -> SweepOutcome:
    """One sweep through the real Sweeper: each knob once, refinement, then (``recommend``) stack and confirm."""
    rng = random.Random(seed)
    knobs = [SimKnob(i) for i in range(len(effects))]
    session = SimSession(model, {k.id: e for k, e in zip(knobs, effects)}, rng)
    ctx = _context()
    session.measure(BASELINE, ctx.base, [])
    sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(max_runs=max_runs, order_seed=rng.randrange(2**31)))
    for knob in knobs:
        cand = Candidate(knob, knob.variants(ctx)[0], knob.id, ctx.base, [knob.id])
        cand.first = sweeper.measure(cand.name, cand.config, cand.knobs)
        sweeper.candidates.append(cand)
    sweeper.refine()
    return tally(sweeper, knobs, effects, recommend=recommend)


def tally(sweeper: Sweeper, knobs: list[SimKnob], effects: list[float], *, recommend: bool = True) -> SweepOutcome:
    """What a simulated sweep decided about ``knobs`` (true effects ``effects``), recommending first if asked."""
    sweeper.judge()
    null = {k.id for k, e in zip(knobs, effects) if e == 0}
    verdicts = {c.name: (c.gain.verdict if c.gain else "undecided") for c in sweeper.candidates}
    recommended: tuple[str, ...] = ()
    reported = truth = None
    confirmation = 0
    if recommend:
        sweeper.recommend(None)
        recommended = tuple(sweeper.sweep.recommended_knobs)
        if recommended and sweeper.sweep.recommended_gain is not None:
            reported, confirmation = sweeper.sweep.recommended_gain.ratio, sweeper.sweep.recommended_gain.runs
            truth = math.prod(1 + sweeper.session.effects.get(k, 0.0) for k in recommended)
    return SweepOutcome(
        false_discoveries=sum(verdicts[k] in ("faster", "slower") for k in null),
        false_faster=sum(verdicts[k] == "faster" for k in null),
        found=sum(verdicts[k.id] == "faster" for k, e in zip(knobs, effects) if e > 0),
        effective=sum(e > 0 for e in effects),
        recommended=recommended,
        recommended_false=bool(recommended) and set(recommended) <= null,
        runs=len(sweeper.results.trials),
        reported_gain=reported,
        true_gain=truth,
        confirmation_runs=confirmation,
    )

"""Simulated parallel sweeps: the family-wise error bound of the real lane sweep on lanes of unequal speed.

    lanes = LaneModel.spread(8, spread=0.20, outlier=1.5, seed=3)     # 8 lanes, one 1.5× slower
    outcome = simulate_lane_sweep(NOISE_MODELS["cpu"], lanes, effects=[0.0] * 20, seed=7)

Why. On one lane the sweep's error rates are measured by benchmarks.sweep_model. On several lanes two things
could break them: lanes of different speeds (GPUs of one model differ by up to ~8 %, a lane on a busy socket by
more) would add their spread to every ratio if a candidate run were compared with another lane's baseline, and a
knob whose runs landed on a slow lane would look slower. The lane sweep compares within lanes and rotates knobs
over lanes; this module measures what that achieves, with the product's code (perfscope.lanes.sweep.LaneSweeper:
A/A check, lane choice, pairs, Sweeper.judge / refine / recommend), lanes run one after another in the simulation.

Each lane has its own speed (a factor on throughput) and its own slow drift (a random walk per lane: a card warms,
a neighbour comes and goes); run noise is the `NoiseModel`'s.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from benchmarks.sweep_model import NoiseModel, SimKnob, SweepOutcome, _context, _results, _trial, tally
from perfscope.lanes.sweep import LaneSweeper
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.search.candidate import BASELINE, Candidate, SweepOptions


@dataclass(frozen=True)
class LaneModel:
    """The lanes' speeds (throughput factors), one per lane."""

    speeds: tuple[float, ...]

    @classmethod
    def spread(cls, count: int, *, spread: float, outlier: float | None = None, seed: int = 0) -> LaneModel:
        """``count`` lanes with speeds in [1 − spread, 1] (both ends taken); with ``outlier``, one more lane that many
        times slower than the median of the others (1.5: at 2/3 of a typical lane's speed)."""
        rng = random.Random(seed)
        speeds = [1.0, 1.0 - spread] + [rng.uniform(1.0 - spread, 1.0) for _ in range(count - 2)]
        speeds = speeds[:count]
        if outlier is not None:
            speeds[-1] = statistics.median(speeds[:-1]) / outlier
        return cls(tuple(speeds))


@dataclass
class SimLane:
    """A lane of the simulation: only its index matters to the sweep (the session knows its speed)."""

    index: int

    def run(self, *args: object, **kwargs: object) -> None:  # pragma: no cover - the simulated session measures
        raise AssertionError("a simulated lane runs nothing")


@dataclass
class SimLaneSession:
    """perfscope.trial.session.Session's stand-in on lanes: a run's rate is 100 samples/s × its lane's speed × the
    true effect of its knobs × exp(its lane's drift + run noise)."""

    model: NoiseModel
    lanes: LaneModel
    effects: dict[str, float]
    rng: random.Random
    results: object = field(default_factory=_results)
    counts: dict[str, int] = field(default_factory=dict)
    levels: dict[int | None, float] = field(default_factory=dict)

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None, *,
                lane: SimLane | None = None) -> Trial:
        knobs = list(knobs or [])
        index = lane.index if lane is not None else None
        step = self.rng.gauss(0.0, self.model.drift) if self.model.drift else 0.0
        self.levels[index] = self.levels.get(index, 0.0) + step
        speed = self.lanes.speeds[index] if index is not None else 1.0
        truth = sum(math.log1p(self.effects.get(k, 0.0)) for k in knobs)
        noise = self.model.noise(self.rng, candidate=configuration != BASELINE)
        rate = 100.0 * speed * math.exp(truth + self.levels[index] + noise)
        repeat = self.counts[configuration] = self.counts.get(configuration, 0) + 1
        name = configuration if repeat == 1 else f"{configuration}-r{repeat}"
        trials = self.results.trials  # type: ignore[attr-defined]
        trial = _trial(name, configuration, repeat, len(trials) + 1, config, knobs, rate)
        trial.lane = index
        trials.append(trial)
        return trial


@dataclass(frozen=True)
class LaneOutcome:
    sweep: SweepOutcome
    dropped: tuple[int, ...]
    """Lanes the A/A check dropped."""


def simulate_lane_sweep(model: NoiseModel, lanes: LaneModel, effects: list[float], *, seed: int, max_runs: int = 10,
                        recommend: bool = True) -> LaneOutcome:
    """One sweep through the real LaneSweeper: the A/A check, every knob's first run one per lane, refinement, then
    (``recommend``) stacking and confirmation."""
    rng = random.Random(seed)
    knobs = [SimKnob(i) for i in range(len(effects))]
    session = SimLaneSession(model, lanes, {k.id: e for k, e in zip(knobs, effects)}, rng)
    ctx = _context()
    session.measure(BASELINE, ctx.base, [])
    sweeper = LaneSweeper(session=session, ctx=ctx, lanes=[SimLane(i) for i in range(len(lanes.speeds))],
                          parallel=False, options=SweepOptions(max_runs=max_runs, order_seed=rng.randrange(2**31)))
    sweeper.aa_check()
    cands = [Candidate(k, k.variants(ctx)[0], k.id, ctx.base, [k.id]) for k in knobs]
    for cand, trial in zip(cands, sweeper.measure_many([(c.name, c.config, c.knobs) for c in cands])):
        cand.first = trial
        sweeper.candidates.append(cand)
    sweeper.refine()
    outcome = tally(sweeper, knobs, effects, recommend=recommend)
    return LaneOutcome(outcome, tuple(r.index for r in sweeper.records.values() if r.dropped))

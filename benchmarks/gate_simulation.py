"""The CI gate's error rates on the path the CLI runs: simulated CI jobs built from one real run, fed to run_gate.

    python benchmarks/gate_simulation.py --jobs 1000 > benchmarks/results/gate_simulation.txt

Each simulated job is a results file whose runs are copies of one real run of tests/data (the quick start's
baseline on the 2-core CPU) with its throughput scaled: run noise (log sd 2%), the job's day offset on its
host, the host's own offset, the code's true change. The history is a BaselineHistory of such jobs; the gate
is `perfscope.check.run_gate` exactly as `perfscope check` calls it (comparability, sessions, hosts,
decision), so every rate here is the CLI's. Scenarios are the rows of issue 35's table, plus hosted runners
(a new host per job). Every rate with its Wilson 95% interval; the upper bound is what a claim may quote.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.stat_simulation import rate
from perfscope.check import GateOptions, run_gate
from perfscope.check.baseline import BaselineHistory
from perfscope.results import Results, Trial

REAL_RUN = Path(__file__).resolve().parents[1] / "tests" / "data" / "reports" / "quick_start_cpu.json"
RUN_SD = 0.02
BASE_RUNS, CURRENT_RUNS, MAX_DROP = 5, 3, 0.05


def real_run() -> tuple[Results, Trial]:
    """The real results file and its first baseline run that counts as evidence: what every synthetic run copies."""
    results = Results.load(REAL_RUN)
    trial = next(t for t in results.trials if t.configuration == "baseline" and t.evidence)
    return results, trial


def scaled(trial: Trial, factor: float, *, name: str, sequence: int) -> Trial:
    """``trial`` with its throughput times ``factor``: wall and step times divided, samples/s multiplied."""
    m = trial.metrics
    assert m is not None and m.samples_per_s is not None
    metrics = replace(m, wall_s=m.wall_s / factor, samples_per_s=m.samples_per_s * factor,
                      step_times_s=[t / factor for t in m.step_times_s])
    return replace(trial, name=name, configuration="baseline", metrics=metrics, sequence=sequence, excluded=None)


def job(template: tuple[Results, Trial], rng: random.Random, *, runs: int, level: float, host: str,
        cores: float | None = None, run_sd: float = RUN_SD) -> Results:
    """One CI job's results: ``runs`` fresh-process runs around log level ``level`` on ``host``."""
    results, trial = template
    environment = replace(results.environment, hostname=host,
                          cpu_cores_usable=cores if cores is not None else results.environment.cpu_cores_usable)
    trials = [scaled(trial, math.exp(level + rng.gauss(0.0, run_sd)), name="baseline" if i == 0 else f"baseline-r{i + 1}",
                     sequence=i + 1) for i in range(runs)]
    return replace(results, environment=environment, trials=trials, sweep=None, findings=[])


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One row: the stored history and the current job, drawn afresh per simulated CI run."""

    name: str
    expect: str  # what a user needs (the right column), in words
    draw: Callable[[tuple[Results, Trial], random.Random], tuple[list[Results], Results]]
    options: GateOptions = field(default_factory=lambda: GateOptions(metrics=("samples_per_s",), max_drop=MAX_DROP))


def _sessions(template, rng, count: int, *, day_sd: float, host: str = "runner-a", host_level: float = 0.0,
              cores: float | None = None) -> list[Results]:
    return [job(template, rng, runs=BASE_RUNS, level=host_level + rng.gauss(0.0, day_sd), host=host, cores=cores)
            for _ in range(count)]


def _current(template, rng, *, change: float, day_sd: float, host: str = "runner-a", host_level: float = 0.0,
             cores: float | None = None) -> Results:
    level = host_level + rng.gauss(0.0, day_sd) + math.log1p(change)
    return job(template, rng, runs=CURRENT_RUNS, level=level, host=host, cores=cores)


def _hosted(count: int, change: float, host_sd: float, day_sd: float):
    """Hosted runners: every job on a new host of one kind (host offset sd ``host_sd``)."""
    def draw(template, rng):
        history = [job(template, rng, runs=BASE_RUNS, level=rng.gauss(0, host_sd) + rng.gauss(0, day_sd), host=f"h{k}")
                   for k in range(count)]
        return history, _current(template, rng, change=change, day_sd=day_sd, host="h-new",
                                 host_level=rng.gauss(0, host_sd))
    return draw


SCENARIOS = [
    Scenario(name="identical code, runner 6% faster with twice the cores", expect="not comparable (exit 4)",
             draw=lambda t, rng: (_sessions(t, rng, 1, day_sd=0.01, cores=2.0),
                                  _current(t, rng, change=0.0, day_sd=0.01, host="runner-b", host_level=math.log(1.06), cores=4.0))),
    Scenario(name="real 10% regression on a runner 10% faster, 10 sessions", expect="never a pass",
             draw=lambda t, rng: (_sessions(t, rng, 10, day_sd=0.01),
                                  _current(t, rng, change=-0.10, day_sd=0.01, host="runner-b", host_level=math.log(1.10)))),
    Scenario(name="identical code on a 7% slower host, 10 sessions of one other host", expect="regression <= 2.5%",
             draw=lambda t, rng: (_sessions(t, rng, 10, day_sd=0.01),
                                  _current(t, rng, change=0.0, day_sd=0.01, host="runner-b", host_level=math.log(0.93)))),
    Scenario(name="one-session baseline, identical code", expect="regression <= 2.5%; says what decides",
             draw=lambda t, rng: (_sessions(t, rng, 1, day_sd=0.02), _current(t, rng, change=0.0, day_sd=0.02))),
    Scenario(name="one-session baseline, 29% drop", expect="regression (fails from the first day)",
             draw=lambda t, rng: (_sessions(t, rng, 1, day_sd=0.02), _current(t, rng, change=-0.29, day_sd=0.02))),
    Scenario(name="real 5% regression, 3 stored sessions", expect="pass <= 2.5%",
             draw=lambda t, rng: (_sessions(t, rng, 3, day_sd=0.02), _current(t, rng, change=-0.05, day_sd=0.02))),
    Scenario(name="day-to-day offset 4%, 3 stored sessions, identical code", expect="regression <= 2.5%",
             draw=lambda t, rng: (_sessions(t, rng, 3, day_sd=0.04), _current(t, rng, change=0.0, day_sd=0.04))),
    Scenario(name="day-to-day offset 4%, 10 stored sessions, identical code", expect="regression <= 2.5%",
             draw=lambda t, rng: (_sessions(t, rng, 10, day_sd=0.04), _current(t, rng, change=0.0, day_sd=0.04))),
    Scenario(name="day-to-day offset 1%, 10 stored sessions, identical code", expect="mostly pass",
             draw=lambda t, rng: (_sessions(t, rng, 10, day_sd=0.01), _current(t, rng, change=0.0, day_sd=0.01))),
    Scenario(name="hosted runners (host 3%, day 1%), 10 sessions, identical code", expect="regression <= 2.5%",
             draw=_hosted(10, 0.0, 0.03, 0.01)),
    Scenario(name="hosted runners (host 3%, day 1%), 10 sessions, 20% drop", expect="mostly regression",
             draw=_hosted(10, -0.20, 0.03, 0.01)),
]


def simulate(scenario: Scenario, jobs: int, *, seed: int = 0) -> Counter[str]:
    """Outcomes of ``jobs`` simulated CI runs of ``scenario`` through run_gate."""
    template = real_run()
    outcomes: Counter[str] = Counter()
    for k in range(jobs):
        rng = random.Random(f"{scenario.name}/{seed}/{k}")
        history, current = scenario.draw(template, rng)
        outcomes[run_gate(current, BaselineHistory(sessions=history), scenario.options).outcome] += 1
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="simulated CI runs per scenario")
    args = parser.parse_args()
    print(f"# python benchmarks/gate_simulation.py --jobs {args.jobs}   (run_gate, samples/s, {BASE_RUNS} runs per stored "
          f"session, {CURRENT_RUNS} current runs, run noise {RUN_SD:.0%}, --max-drop {MAX_DROP:.0%}; rates with Wilson 95%)")
    outcomes = ("pass", "regression", "inconclusive", "not_comparable")
    print(f"{'scenario':<66} {'needed':<40} " + " ".join(f"{o:<30}" for o in outcomes))
    for scenario in SCENARIOS:
        start = time.perf_counter()
        counts = simulate(scenario, args.jobs)
        cells = " ".join(f"{rate(counts[o], args.jobs):<30}" for o in outcomes)
        print(f"{scenario.name:<66} {scenario.expect:<40} {cells}  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()


__all__ = ["SCENARIOS", "Scenario", "job", "real_run", "scaled", "simulate"]

"""The sweep's `Measures` with real trials run in this process (trial/session.py runs them in children), so a knob
registered in a test is the one the loop sees; a real analysis forks its trials from a process that imported the
registry."""

from __future__ import annotations

import time

from perfscope.results import Environment, Trial
from perfscope.results.config import TrialConfig
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload
from tests.factories import make_results


class InProcessSession:
    def __init__(self, workload: Workload, environment: Environment | None = None) -> None:
        self.workload = workload
        self.results = make_results([], device_type="cpu")
        if environment is not None:
            self.results.environment = environment

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None) -> Trial:
        repeat = 1 + sum(1 for t in self.results.trials if t.configuration == configuration)
        start = time.perf_counter()
        run = run_trial(self.workload, config)
        trial = Trial(name=configuration if repeat == 1 else f"{configuration}-r{repeat}", configuration=configuration,
                      repeat=repeat, sequence=len(self.results.trials) + 1, config=config, status="ok",
                      knobs=list(knobs or []), metrics=run.metrics, wall_time_s=time.perf_counter() - start)
        self.results.trials.append(trial)
        return trial

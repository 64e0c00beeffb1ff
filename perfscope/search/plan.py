"""How long an analysis will take, said before its first run: the sweep's plan in runs, times a run's wall time.

Design notes: docs/sweep.md."""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfscope.knobs import REGISTRY, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.search.candidate import CONFIRMATION_RUNS, JOIN_RUNS, SweepOptions

CPU_MICRO_FACTOR, GPU_MICRO_FACTOR = 4, 64
"""How far the micro-batch search doubles (perfscope.search.sweep.Sweeper.micro_batch): its points at most."""


RUNS_PER_VERDICT = 4
"""Runs a configuration usually takes to a verdict: verdicts start at 3 (compare.MIN_DECIDING_RUNS), and with Welch's
degrees of freedom capped at k − 1 a winner is mostly decided at its 4th (the quick start: 67 runs where 3 per verdict
planned 59)."""

LANE_AA_RUNS = 2
"""The parallel sweep's A/A check: baseline runs per lane, all lanes at once (perfscope.lanes.sweep.AA_RUNS)."""


@dataclass(frozen=True)
class Plan:
    configurations: list[str]
    """What the sweep's first pass measures beside the baseline: knob variants, then micro-batch points."""
    budget_s: float | None
    baseline_runs: int = 1
    """Runs of the baseline before the sweep (`--repeat` without a sweep)."""
    lanes: int = 1
    """Lanes the sweep runs on (`--lanes`, `--devices`)."""

    @property
    def runs(self) -> int:
        """The baseline, then each configuration until a verdict (each run beside a baseline run), a join and the
        confirmation."""
        if not self.configurations:
            return self.baseline_runs
        return self.baseline_runs + 2 * RUNS_PER_VERDICT * len(self.configurations) + JOIN_RUNS + CONFIRMATION_RUNS

    @property
    def run_times(self) -> int:
        """Runs one after another the analysis takes: all of them on one lane; with lanes, the knob variants' runs
        shared among the lanes, the rest (baseline, micro-batch points, join, confirmation) run by run, plus the
        A/A check."""
        if self.lanes <= 1 or not self.configurations:
            return self.runs
        micro = sum(c.startswith("micro-batch") for c in self.configurations)
        in_turn = self.baseline_runs + 2 * RUNS_PER_VERDICT * micro + JOIN_RUNS + CONFIRMATION_RUNS
        return in_turn + LANE_AA_RUNS + math.ceil((self.runs - in_turn) / self.lanes)

    def expected_s(self, run_s: float) -> float:
        unbounded = self.run_times * run_s
        return min(unbounded, self.budget_s) if self.budget_s is not None else unbounded

    def words(self, run_s: float, source: str) -> list[str]:
        """The announcement, two lines: what will be measured in how many runs, and the expected time with the budget
        that bounds it."""
        more = len(self.configurations) - 8
        shown = ", ".join(self.configurations[:8]) + (f", … ({more} more)" if more > 0 else "")
        what = (f"{len(self.configurations)} configurations beside the baseline ({shown}), each repeated until decided, "
                "the winners stacked and confirmed" if self.configurations else "the baseline")
        unbounded = self.run_times * run_s
        lanes = (f" on {self.lanes} lanes at once (about {self.run_times} run times, an A/A check included)"
                 if self.run_times != self.runs else "")
        plan = f"plan: {what}: about {self.runs} run(s) of ~{run_s:.1f} s ({source}){lanes}"
        if not self.configurations:
            return [plan, f"expected time: about {minutes(unbounded)}"]
        if self.budget_s is None:
            return [plan, f"expected time: about {minutes(unbounded)} (no budget: --budget S bounds it)"]
        if unbounded <= self.budget_s:
            expected = (f"expected time: about {minutes(unbounded)}, within its budget of {minutes(self.budget_s)} "
                        "(--budget S, --no-budget)")
        else:
            expected = (f"expected time: {minutes(self.budget_s)}, its budget (--budget S, --no-budget; unbounded about "
                        f"{minutes(unbounded)}): the sweep then recommends what it decided and names what it did not finish")
        return [plan, expected]


def run_estimate(process_s: float, step_s: float | None, config: TrialConfig) -> float:
    """A run's wall time before any run measured one: the probe process's own (start, import, model, its steps), plus
    the run's warm-up and calibrated window at the probe's step time (`perfscope.trial.loop.calibrate_steps`)."""
    if not step_s:
        return process_s
    window = config.steps or min(max(math.ceil(config.min_window_s / step_s), config.min_steps), config.max_steps)
    return process_s + (config.warmup_steps + window) * step_s


def minutes(seconds: float) -> str:
    """"45 s", "4 min 10 s": a duration as a person reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min" + (f" {rest} s" if rest else "")


def plan_sweep(ctx: KnobContext, options: SweepOptions | None, baseline_runs: int = 1, lanes: int = 1) -> Plan:
    """The configurations the sweep's first pass will measure, by its own rules (None: no sweep), on ``lanes``."""
    if options is None:
        return Plan(configurations=[], budget_s=None, baseline_runs=baseline_runs)
    planned: list[str] = []
    micro = False
    for knob in REGISTRY:
        if knob.applies(ctx) is not None or (options.only and knob.id not in options.only) or knob.id in options.skip:
            continue
        if knob.search == "micro_batch":
            micro = True
        elif knob.frees == "activations" and ctx.cuda:
            continue  # measured only paired with a micro-batch the search finds out of memory
        elif knob.builds_on is None or knob.prerequisite_met(ctx.base) or knob.builds_on in planned:
            variants = len(knob.variants(ctx))
            planned += [knob.id] + [f"{knob.id}-{i}" for i in range(2, variants + 1)]
    if micro:
        factor = GPU_MICRO_FACTOR if ctx.cuda else CPU_MICRO_FACTOR
        planned += [f"micro-batch ×{2 ** i}" for i in range(1, int(math.log2(factor)) + 1)]
    return Plan(configurations=planned, budget_s=options.budget_s, lanes=lanes)

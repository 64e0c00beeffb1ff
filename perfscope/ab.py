"""`perfscope ab BASELINE.py CANDIDATE.py`: the CI gate's A/B mode, both revisions measured in one job, interleaved.

Design notes: docs/internals.md."""

from __future__ import annotations

import dataclasses
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from perfscope.analyze import AnalyzeOptions, baseline_config, new_results, probe
from perfscope.check.compat import find_differences
from perfscope.check.decision import decide_paired
from perfscope.check.gate import ErrorCode, GateOptions, GateReport
from perfscope.check.metrics import Side
from perfscope.check.structure import diff_sides, runs_consensus
from perfscope.errors import UserError
from perfscope.measure.mfu import choose_peak
from perfscope.report.reference import configuration_rate
from perfscope.results import Results
from perfscope.results.messages import msg
from perfscope.search.compare import paired_test
from perfscope.trial.runner import TrialRunner
from perfscope.trial.session import Progress, Session
from perfscope.workload import Workload, load_workload

SIDES = ("baseline", "candidate")
REVISION_FIELDS = ("workload name", "workload sha256")
"""Differences A/B exists to measure: named, never refused."""


@dataclass(kw_only=True)
class ABOptions:
    baseline_path: Path
    candidate_path: Path
    out_dir: Path = Path("perfscope-ab")
    rounds: int = 8
    """Runs of each revision that count; each round runs both in a random order, after one discarded warm-up run each."""
    seed: int | None = None
    """Seed of the rounds' order (None: a fresh one, printed in the notes so that a job can be replayed)."""
    device: str = "auto"
    steps: int | None = None
    warmup_steps: int = 5
    min_window_s: float = 0.5
    trial_timeout_s: float = 600.0
    max_drop: float = 0.05
    peak_tflops: float | None = None

    def __post_init__(self) -> None:
        if self.rounds < 2:
            raise UserError(f"--rounds must be >= 2 (one candidate run says nothing of the noise), got {self.rounds}")
        if self.baseline_path.resolve() == self.candidate_path.resolve():
            raise UserError("the baseline and candidate are the same file; give the baseline revision's copy "
                            "(e.g. from `git worktree add ../base origin/main`)")


def _side(path: Path, options: ABOptions, out: Path) -> tuple[Results, AnalyzeOptions, Workload]:
    workload = load_workload(path)
    analyze = AnalyzeOptions(workload_path=path, out_dir=out, device=options.device, steps=options.steps,
                             warmup_steps=options.warmup_steps, min_window_s=options.min_window_s,
                             trial_timeout_s=options.trial_timeout_s, capture_trace=False, report=False)
    return new_results(path, workload, ["perfscope", *sys.argv[1:]]), analyze, workload


def run_ab(options: ABOptions) -> GateReport:
    """Measure both revisions interleaved and decide; results.json of each side is written under out_dir."""
    paths = {"baseline": options.baseline_path.resolve(), "candidate": options.candidate_path.resolve()}
    sides = {name: _side(paths[name], options, options.out_dir / name) for name in SIDES}
    progress = Progress()
    with TrialRunner(options.out_dir / "trials") as runner:
        sessions: dict[str, Session] = {}
        configs = {}
        for name in SIDES:
            results, analyze, workload = sides[name]
            print(f"perfscope: validating the {name} {paths[name].name} (one step on the device) ...", file=sys.stderr)
            probed = probe(runner, options.device, analyze.out_dir, options.trial_timeout_s, paths[name])
            results.environment = probed.environment
            results.workload.model = probed.model
            configs[name] = baseline_config(workload, analyze, probed.device)
            sessions[name] = Session(results, out_dir=analyze.out_dir, workload_path=paths[name],
                                     timeout_s=options.trial_timeout_s, progress=progress, runner=runner)
        peak = choose_peak(sides["baseline"][0].environment, options.peak_tflops)
        for name in SIDES:  # one MFU denominator for both sides
            sides[name][0].peak = peak
        seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
        order = measurement_order(options.rounds, seed)
        numbered: set[tuple[str, str]] = set()
        for name, warmup in order:
            trial = sessions[name].measure(name, configs[name])
            if warmup and trial.ok and trial.excluded is None:
                trial.excluded = WARMUP
            for trial in sessions[name].results.trials:  # one measurement order across both sides (retries included)
                if (name, trial.name) not in numbered:
                    numbered.add((name, trial.name))
                    trial.sequence = len(numbered)
            sessions[name].save()
    report = _decide(sides["baseline"][0], sides["candidate"][0], options)
    rounds = " ".join("".join("B" if n == "baseline" else "C" for n, _ in order[i:i + 2]) for i in range(0, len(order), 2))
    report.notes.append(msg("ab_order", rounds=rounds, seed=seed))
    return report


WARMUP = msg("warmup_discarded")


def measurement_order(rounds: int, seed: int) -> list[tuple[str, bool]]:
    """(side, is warm-up) in measurement order: one warm-up run of each, then ``rounds`` rounds of one run of each,
    every pair in its own random order (asv's `continuous` interleaves; a random order keeps a fixed position's
    penalty out of the difference)."""
    rng = random.Random(seed)
    pairs = [rng.sample(SIDES, 2) for _ in range(rounds + 1)]
    return [(name, i == 0) for i, pair in enumerate(pairs) for name in pair]


def _decide(base: Results, cand: Results, options: ABOptions) -> GateReport:
    report = GateReport(options=GateOptions(metrics=("samples_per_s",), max_drop=options.max_drop, allow_mismatch=False),
                        current_source=str(options.candidate_path), baseline_source=str(options.baseline_path),
                        current_trial="candidate", baseline_trial="baseline")
    base_runs, cand_runs = base.runs("baseline"), cand.runs("candidate")
    report.notes.append(msg("ab_one_job", host=base.environment.hostname or None, candidate=len(cand_runs),
                            baseline=len(base_runs)))
    for results, role in ((base, "baseline"), (cand, "candidate")):
        excluded = [t for t in results.trials if t.ok and t.excluded]
        if excluded:
            why = list(dict.fromkeys(t.excluded for t in excluded if t.excluded))
            report.notes.append(msg("runs_not_used", role=role, runs=len(excluded), why=why))
    # Comparability and structure from every successful run, contended ones included: a count does not depend on
    # the load (as check's fingerprints), so a busy machine still gets the structural diff.
    base_ok, cand_ok = ([t for t in r.trials if t.ok] for r in (base, cand))
    if base_ok and cand_ok:
        found = find_differences(Side(results=cand, runs=cand_ok), Side(results=base, runs=base_ok),
                                 metric_ids={"samples_per_s"})
        report.differences = [dataclasses.replace(d, blocking=False) if d.what in REVISION_FIELDS else d for d in found]
        report.structure = diff_sides(runs_consensus(base_ok), runs_consensus(cand_ok), names=("baseline", "candidate"))
    if report.blocking_differences:
        return report
    if base.trials and not any(t.ok for t in base.trials):
        first = base.trials[0]
        report.error(ErrorCode.BASELINE_FAILED, msg("ab_baseline_failed", name=first.name, status=first.status,
                                                    error=first.error))
        return report
    failed = [t for t in cand.trials if not t.ok]
    if failed and not cand_runs:
        report.failed_current = failed[0]
        report.verdicts.append(dataclasses.replace(decide_paired(None, max_drop=options.max_drop), status="regression",
                               message=msg("verdict_run_failed", title="samples/s", role="candidate", name=failed[0].name,
                                           status=failed[0].status, error=failed[0].error)))
        return report
    base_rate, cand_rate = configuration_rate(base, "baseline"), configuration_rate(cand, "candidate")  # geometric means
    verdict = decide_paired(paired_test(cand_runs, base_runs), max_drop=options.max_drop, n_baseline=len(base_runs),
                            baseline=base_rate and base_rate[0], current=cand_rate and cand_rate[0])
    if report.structure is not None and verdict.status != "pass":
        verdict = dataclasses.replace(verdict, message=msg("verdict_with_structure", verdict=verdict.message,
                                                           structure=report.structure.summary()))
    report.verdicts.append(verdict)
    return report

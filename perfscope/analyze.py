"""`perfscope analyze FILE`: validate, probe, measure, sweep, then diagnose, save and report (perfscope.pipeline).

Design notes: docs/internals.md."""

from __future__ import annotations

import dataclasses
import math
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfscope._version import __version__
from perfscope.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, UserError, WorkloadError
from perfscope.lanes.sweep import LaneOptions, parallel_sweep
from perfscope.measure.mfu import choose_peak
from perfscope.pipeline import finish
from perfscope.report.markdown import answer_lines, summary_table
from perfscope.results import Environment, ModelFacts, Results, ResultsError, WorkloadInfo, from_jsonable
from perfscope.results.config import TrialConfig
from perfscope.results.constraints import MAX_SECONDS, MAX_TFLOPS
from perfscope.results.messages import msg
from perfscope.results.outdir import claim_output_dir
from perfscope.search.candidate import DEFAULT_BUDGET_S
from perfscope.search.layout import run_layout_search
from perfscope.search.plan import plan_sweep, run_estimate
from perfscope.search.sweep import BASELINE, SweepOptions, knob_context, run_sweep
from perfscope.trial.follower import stop_followers
from perfscope.trial.launch import Launch
from perfscope.trial.runner import TrialRunner
from perfscope.trial.session import Progress, Session
from perfscope.trial.spec import ProbeSpec
from perfscope.workload import Workload, file_sha256, load_workload

PROBE_TIMEOUT_FLOOR_S = 120.0
"""The probe (import, one dry-run step, machine description, matmul ceilings) gets at least this long,
whatever --trial-timeout says: a small trial limit must not kill the probe instead of a trial."""


@dataclass(kw_only=True)
class AnalyzeOptions:
    workload_path: Path
    out_dir: Path = Path("perfscope-out")
    device: str = "auto"
    """auto | cpu | cuda."""
    steps: int | None = None
    """Timed steps per run; None calibrates each run's window to at least `min_window_s`."""
    warmup_steps: int = 5
    min_window_s: float = 0.5
    batch_size: int | None = None
    """Override of the workload's micro-batch size."""
    trial_timeout_s: float = 600.0
    peak_tflops: float | None = None
    resume: bool = False
    sweep: bool = True
    """False: measure the baseline only (what a CI job runs)."""
    repeat: int = 1
    """Runs of the baseline (fresh processes) when there is no sweep: the CI gate's evidence."""
    budget_s: float | None = DEFAULT_BUDGET_S
    """Wall seconds for the analysis from its first run (None: unbounded): announced before it, kept by the sweep."""
    max_runs: int = 10
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    capture_trace: bool = True
    launch: Launch | None = None
    """torchrun's arguments: every run is a job of launch.world_size ranks (None: one process)."""
    report: bool = True
    command: list[str] = field(default_factory=list)
    parallel: LaneOptions | None = None
    """Run the sweep on lanes (perfscope.lanes: --lanes / --devices / --executor); None: one run at a time."""

    def __post_init__(self) -> None:
        """The library's own check of what the CLI checks with argparse: a bad value never reaches a run."""
        for name, limit in (("peak_tflops", MAX_TFLOPS), ("trial_timeout_s", MAX_SECONDS), ("min_window_s", MAX_SECONDS),
                            ("budget_s", MAX_SECONDS)):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and 0 < value <= limit):
                raise UserError(f"{name} must be a finite number in (0, {limit:g}], got {value!r}")
        if self.parallel is not None and self.launch is not None and self.launch.nnodes > 1:
            raise UserError("--lanes/--devices with a multi-node torchrun job is not supported: a lane is on one node")
        if self.parallel is not None and self.launch is not None and self.launch.nproc_per_node > 1:
            # a lane per group of devices: each torchrun trial takes its devices together (perfscope.lanes.plan)
            self.parallel = dataclasses.replace(self.parallel, ranks=self.launch.nproc_per_node)


@dataclass
class Probe:
    device: str
    environment: Environment
    model: ModelFacts | None
    wall_s: float = 0.0
    """The probe process's wall time (import, model, one step)."""
    step_s: float | None = None
    """Its dry-run step's wall time scaled to the workload's micro-batch: with ``wall_s``, a run's cost before any run
    (an overestimate: a first step's one-time costs; re-announced once the baseline ran)."""


def probe(runner: TrialRunner, device: str, out_dir: Path, timeout_s: float, workload_path: Path | None = None) -> Probe:
    """Resolve the device, validate the workload on it, inspect the model and read the machine — in a
    trial-like process, so this one never touches a device or builds the model."""
    spec = ProbeSpec(device=device, workload_path=str(workload_path) if workload_path else None)
    outcome = runner.run(spec, out_dir / "trials" / "_probe", timeout_s=max(timeout_s, PROBE_TIMEOUT_FLOOR_S))
    if outcome.status == "invalid":
        raise WorkloadError(outcome.error or "the workload failed validation")
    if outcome.status != "ok":
        raise UserError(f"probing the {device} device failed ({outcome.status}): {outcome.error}")
    payload: dict[str, Any] = outcome.payload
    model = from_jsonable(ModelFacts, payload["model"]) if payload.get("model") else None
    return Probe(payload["device"], from_jsonable(Environment, payload["environment"]), model, outcome.wall_time_s,
                 payload.get("step_s"))


def baseline_config(workload: Workload, options: AnalyzeOptions, device: str) -> TrialConfig:
    """The user's loop as it is today: their batch, precision, accumulation and loader settings."""
    return TrialConfig(device=device, micro_batch_size=options.batch_size or workload.batch_size,  # type: ignore[arg-type]
                       grad_accum_steps=workload.grad_accum_steps, steps=options.steps, warmup_steps=options.warmup_steps,
                       min_window_s=options.min_window_s, precision=workload.precision, pin_memory=workload.pin_memory,
                       num_workers=workload.num_workers if workload.dataset is not None else 0,
                       capture_trace=options.capture_trace, **distributed_settings(workload, options.launch))


def distributed_settings(workload: Workload, launch: Launch | None) -> dict[str, Any]:
    """The data-parallel part of the user's loop as it is today (nothing for one process)."""
    if launch is None or launch.world_size == 1:
        return {}
    return {"nproc_per_node": launch.nproc_per_node, "nnodes": launch.nnodes,
            "data_parallel": "none" if workload.wraps_model else workload.data_parallel,
            "no_sync": workload.no_sync and workload.grad_accum_steps > 1}


def new_results(workload_path: Path, workload: Workload, command: list[str]) -> Results:
    """The results of a measurement about to start; the probe then replaces the placeholder environment."""
    info = WorkloadInfo(path=str(workload_path), sha256=file_sha256(workload_path),
                        name=workload.name or workload_path.stem, declared=workload.declared())
    return Results(perfscope_version=__version__, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   command=command, environment=Environment(device_type="unknown", device_name="(probing)"),
                   workload=info)


def _load_or_create_results(options: AnalyzeOptions, workload: Workload) -> Results:
    path = options.out_dir / "results.json"
    if not (options.resume and path.exists()):
        return new_results(options.workload_path, workload, options.command)
    try:
        previous = Results.load(path)
    except ResultsError as exc:
        raise UserError(f"--resume: {exc}") from None
    if previous.workload.sha256 != file_sha256(options.workload_path):
        raise UserError(f"--resume: {path} was measured with a different version of {options.workload_path}")
    previous.command = options.command
    return previous


def analyze(options: AnalyzeOptions) -> int:
    """Check the options and claim --out (exit 2 at once when either fails), then measure into it."""
    # --only/--skip checked even with --no-sweep, before the workload's code runs
    checked = SweepOptions(budget_s=options.budget_s, only=list(options.only), skip=list(options.skip),
                           trace_recommended=options.capture_trace, max_runs=options.max_runs)
    with claim_output_dir(options.out_dir):
        return _analyze(options, checked if options.sweep else None)


def _analyze(options: AnalyzeOptions, sweep_options: SweepOptions | None) -> int:
    workload_path = options.workload_path.resolve()
    options.workload_path = workload_path
    workload = load_workload(workload_path)
    results = _load_or_create_results(options, workload)
    with TrialRunner(options.out_dir / "trials") as runner:
        print(f"perfscope: validating {workload_path.name} (one step on the device), probing the machine ...",
              file=sys.stderr, flush=True)
        probed = probe(runner, options.device, options.out_dir, options.trial_timeout_s, workload_path)
        if options.resume and results.environment.device_type not in ("unknown", probed.device):
            raise UserError(f"--resume: the results were measured on {results.environment.device_type}, not {probed.device}")
        if results.environment.device_name == "(probing)":
            results.environment = probed.environment
        results.workload.model = probed.model
        results.workload.parameter_count = probed.model.parameter_count if probed.model else None
        results.peak = choose_peak(results.environment, options.peak_tflops)
        if results.peak is not None:
            print(f"perfscope: MFU denominator {results.peak.tflops:g} TFLOP/s ({results.peak.dtype}; {results.peak.source})",
                  file=sys.stderr)
        with _terminate_as_ctrl_c():
            interrupted = _measure(results, options, runner, workload, workload_path, probed, sweep_options)
    report_path = options.out_dir / "report.html" if options.report else None
    finish(results, options.out_dir, report=options.report)
    print(summary_table(results))
    print(answer_lines(results, report_path))
    if interrupted:
        return EXIT_INTERRUPTED
    if not results.ok_trials():
        print("perfscope: every run failed — see the errors above and in results.json", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


@contextmanager
def _terminate_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (a cancelled CI job, `timeout`, `kill`) stops the runs as Ctrl-C does, so the finished runs are still
    reported: a background job ignores SIGINT, and SIGTERM's default would lose the report and the layout table.
    Only the main thread may install a handler; elsewhere (analyze called from a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _measure(results: Results, options: AnalyzeOptions, runner: TrialRunner, workload: Workload, workload_path: Path,
             probed: Probe, sweep_options: SweepOptions | None) -> bool:
    """Every run of the analysis; True when Ctrl-C interrupted it (the finished runs are kept)."""
    device = probed.device
    progress = Progress(budget_s=sweep_options.budget_s if sweep_options is not None else None)
    session = Session(results, out_dir=options.out_dir, workload_path=workload_path, timeout_s=options.trial_timeout_s,
                      resume=options.resume, progress=progress, runner=runner, launch=options.launch)
    session.save()
    if progress.budget_s is not None:  # the baseline's retries under load count against the budget too
        budget = progress.budget_s
        session.may_retry = lambda: progress.elapsed() + (results.trials[-1].wall_time_s or 0.0) <= budget
    base: TrialConfig | None = None
    try:
        base = baseline_config(workload, options, device)
        model_known = results.workload.model is not None
        lanes = options.parallel.count if options.parallel is not None else 1
        plan = plan_sweep(knob_context(results, workload, base), sweep_options, options.repeat, lanes) if model_known else None
        estimate = run_estimate(probed.wall_s, probed.step_s, base)
        if plan is not None:  # before the first run: how long the analysis will take
            step = f"{probed.step_s * 1e3:.0f} ms a step" if probed.step_s else "no step timed"
            _announce(plan.words(estimate, f"from the probe: {probed.wall_s:.1f} s a process, {step}"))
        baseline = session.measure(BASELINE, base)
        for _ in range(options.repeat - 1):
            session.measure(BASELINE, base.replace(capture_trace=False))
        if plan is not None and plan.configurations and baseline.ok and baseline.wall_time_s:
            measured = baseline.wall_time_s
            if abs(plan.expected_s(measured) - plan.expected_s(estimate)) > 0.25 * plan.expected_s(estimate):
                again = plan.words(measured, "the baseline run")[1]
                _announce([f"the baseline run took {measured:.1f} s (estimated {estimate:.1f} s): {again}"])
        if sweep_options is not None and baseline.ok:
            with parallel_sweep(options.parallel, options.out_dir / "trials", timeout_s=options.trial_timeout_s) as sweeper:
                run_sweep(session, workload, base, sweep_options, sweeper=sweeper)
            if base.distributed and _layouts_selected(sweep_options):
                run_layout_search(session, workload, base)
        elif sweep_options is not None:
            results.notes.append(msg("no_sweep_baseline_failed", status=baseline.status))
    except KeyboardInterrupt:
        results.notes.append(msg("interrupted_by_user"))
        print("\nperfscope: interrupted — saving the finished runs", file=sys.stderr)
        if (base is not None and base.distributed and sweep_options is not None and results.layouts is None
                and _layouts_selected(sweep_options)):
            # The layouts the sweep already measured (its tensor_parallel and pipeline_parallel runs) still rank.
            run_layout_search(session, workload, base, not_measuring="the analysis was interrupted before it ran")
        return True
    finally:
        if options.launch is not None and options.launch.nnodes > 1:
            print("perfscope: telling the other nodes' workers that the analysis is over ...", file=sys.stderr)
            stop_followers(options.launch, options.out_dir / "trials" / "_stop", device=device)
    return False


def _announce(lines: list[str]) -> None:
    for line in lines:
        print(f"perfscope: {line}", file=sys.stderr, flush=True)


def _layouts_selected(options: SweepOptions) -> bool:
    """The layout search runs with the model-parallel knobs: not when --skip names both, or --only neither."""
    ids = {"tensor_parallel", "pipeline_parallel"}
    return not ids <= set(options.skip) and (not options.only or bool(ids & set(options.only)))

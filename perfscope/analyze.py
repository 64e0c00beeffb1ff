"""`perfscope analyze FILE`: validate the workload, probe the machine, measure, save, diagnose, report.

    perfscope analyze examples/tiny_transformer.py --device cpu --out perfscope-out

Stages, each usable alone: measurement writes results.json (trial by trial) → rules add findings →
the report renders. A broken workload file fails here in seconds, before any trial starts: the import
and workload() run in this process, and a one-step dry run on the trial device in the probe process.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch

from perfscope import __version__
from perfscope.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UserError,
    WorkloadError,
)
from perfscope.measure.mfu import choose_peak
from perfscope.results import (
    Environment,
    Results,
    ResultsError,
    WorkloadInfo,
    from_jsonable,
)
from perfscope.search.sweep import SweepOptions, run_sweep
from perfscope.session import Progress, Session
from perfscope.trial.config import TrialConfig
from perfscope.trial.runner import run_isolated
from perfscope.workload import Workload, file_sha256, load_workload


@dataclass(kw_only=True)
class AnalyzeOptions:
    workload_path: Path
    out_dir: Path = Path("perfscope-out")
    device: str = "auto"
    """auto | cpu | cuda."""
    steps: int = 20
    warmup_steps: int = 5
    batch_size: int | None = None
    """Override of the workload's micro-batch size."""
    trial_timeout_s: float = 600.0
    peak_tflops: float | None = None
    resume: bool = False
    sweep: bool = True
    """False: measure the baseline only (what a CI job runs)."""
    budget_s: float | None = None
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    capture_trace: bool = True
    report: bool = True
    command: list[str] = field(default_factory=list)


def resolve_device(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was requested but CUDA is not available (torch.cuda.is_available() is False)")
    return requested


def probe_environment(device: str, out_dir: Path, timeout_s: float, workload_path: Path | None = None) -> Environment:
    """Validate the workload on the device, then read the environment and matmul ceilings — in a trial-like
    subprocess, so the parent never touches CUDA."""
    spec = {"mode": "probe", "device": device, "workload_path": str(workload_path) if workload_path else None}
    outcome = run_isolated(spec, out_dir / "trials" / "_probe", timeout_s=timeout_s)
    if outcome.status == "invalid":
        raise WorkloadError(outcome.error or "the workload failed validation")
    if outcome.status != "ok":
        raise UserError(f"probing the {device} device failed ({outcome.status}): {outcome.error}")
    return from_jsonable(Environment, outcome.payload["environment"])


def baseline_config(workload: Workload, options: AnalyzeOptions, device: str) -> TrialConfig:
    """The user's loop as it is today: their batch, precision, accumulation and loader settings."""
    return TrialConfig(
        device=device,  # type: ignore[arg-type]
        micro_batch_size=options.batch_size or workload.batch_size,
        grad_accum_steps=workload.grad_accum_steps,
        steps=options.steps,
        warmup_steps=options.warmup_steps,
        precision=workload.precision,
        num_workers=workload.num_workers if workload.dataset is not None else 0,
        pin_memory=workload.pin_memory,
        capture_trace=options.capture_trace,
    )


def _load_or_create_results(options: AnalyzeOptions, workload: Workload, device: str) -> Results:
    path = options.out_dir / "results.json"
    info = WorkloadInfo(
        path=str(options.workload_path),
        sha256=file_sha256(options.workload_path),
        name=workload.name or options.workload_path.stem,
        declared=workload.declared(),
    )
    if options.resume and path.exists():
        try:
            previous = Results.load(path)
        except ResultsError as exc:
            raise UserError(f"--resume: {exc}") from None
        if previous.workload.sha256 != info.sha256:
            raise UserError(f"--resume: {path} was measured with a different version of {options.workload_path}")
        if previous.environment.device_type != device:
            raise UserError(f"--resume: {path} was measured on {previous.environment.device_type}, not {device}")
        previous.command = options.command
        return previous
    return Results(
        perfscope_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        source="analyze",
        command=options.command,
        environment=Environment(device_type=device, device_name="(probing)"),
        workload=info,
    )


def analyze(options: AnalyzeOptions) -> int:
    workload_path = options.workload_path.resolve()
    options.workload_path = workload_path
    workload = load_workload(workload_path)
    device = resolve_device(options.device)
    options.out_dir.mkdir(parents=True, exist_ok=True)

    results = _load_or_create_results(options, workload, device)
    print(f"perfscope: validating {workload_path.name} (one {device} step), probing the machine ...", file=sys.stderr, flush=True)
    environment = probe_environment(device, options.out_dir, options.trial_timeout_s, workload_path)
    if results.environment.device_name == "(probing)":
        results.environment = environment
    results.peak = choose_peak(results.environment, options.peak_tflops)
    if results.peak is not None:
        print(f"perfscope: MFU denominator {results.peak.tflops:g} TFLOP/s ({results.peak.dtype}; {results.peak.source})", file=sys.stderr)

    sweep_options = _sweep_options(options)  # validates --only/--skip before any trial runs
    progress = Progress(budget_s=options.budget_s)
    session = Session(
        results, out_dir=options.out_dir, workload_path=workload_path, timeout_s=options.trial_timeout_s,
        resume=options.resume, progress=progress,
    )
    session.save()
    interrupted = False
    try:
        base = baseline_config(workload, options, device)
        baseline = session.measure("baseline", base)
        if sweep_options is not None and baseline.ok:
            run_sweep(session, workload, base, sweep_options)
        elif sweep_options is not None:
            results.notes.append(f"no sweep: the baseline trial did not succeed ({baseline.status})")
    except KeyboardInterrupt:
        interrupted = True
        results.notes.append("interrupted by the user: the trials that finished are reported")
        print("\nperfscope: interrupted — saving the finished trials", file=sys.stderr)
    _diagnose(results)
    session.save()
    if options.report:
        _write_report(results, options.out_dir)
    print(summary_table(results))
    print(f"\nresults: {session.results_path}")
    if interrupted:
        return EXIT_INTERRUPTED
    if not results.ok_trials():
        print("perfscope: every trial failed — see the errors above and in results.json", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


def _sweep_options(options: AnalyzeOptions) -> SweepOptions | None:
    if not options.sweep:
        return None
    return SweepOptions(
        budget_s=options.budget_s, only=list(options.only), skip=list(options.skip), trace_recommended=options.capture_trace
    )


def _diagnose(results: Results) -> None:
    try:
        from perfscope.rules import run_rules
    except ImportError:
        return
    if results.ok_trials():
        results.findings = run_rules(results)


def _write_report(results: Results, out_dir: Path) -> None:
    try:
        from perfscope.report import write_report
    except ImportError:
        return
    try:
        path = write_report(results, out_dir / "report.html", fmt="html")
        write_report(results, out_dir / "report.md", fmt="md")  # the same findings, for terminals, CI logs and tools
        print(f"report:  {path}")
    except Exception as exc:  # noqa: BLE001 - a report failure must not lose measured results
        print(f"perfscope: warning: the report could not be written ({type(exc).__name__}: {exc}); "
              f"results.json is intact — retry with `perfscope report`", file=sys.stderr)


def _fmt_bytes(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def summary_table(results: Results) -> str:
    """A short plain-text table of the trials, for the terminal."""
    env = results.environment
    lines = [f"\n{results.workload.name} on {env.device_name} ({env.device_type})"]
    header = f"{'trial':<28} {'status':<9} {'step ms (p10-p90)':<22} {'samples/s':>10} {'MFU':>7} {'HFU':>7} {'data wait':>9} {'peak mem':>10}"
    lines += [header, "-" * len(header)]
    for t in results.trials:
        m = t.metrics
        if m is None or t.status not in ("ok", "nonfinite"):
            reason = (t.error or "").splitlines()[0][:60] if t.error else ""
            lines.append(f"{t.name:<28} {t.status:<9} {reason}")
            continue
        st = m.step_time_s
        times = f"{st.median * 1e3:.1f} ({st.p10 * 1e3:.1f}-{st.p90 * 1e3:.1f})"
        mfu = f"{m.mfu:.1%}" if m.mfu is not None else "n/a"
        hfu = f"{m.hfu:.1%}" if m.hfu is not None else "n/a"
        lines.append(
            f"{t.name:<28} {t.status:<9} {times:<22} {m.samples_per_s:>10.1f} {mfu:>7} {hfu:>7} "
            f"{m.data_wait_fraction:>9.1%} {_fmt_bytes(m.peak_memory_bytes):>10}"
        )
    if results.peak is not None:
        lines.append(f"MFU against {results.peak.tflops:g} TFLOP/s ({results.peak.source})")
    return "\n".join(lines)

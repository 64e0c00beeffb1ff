"""The `perfscope` command: parse, call the library, map outcomes to exit codes. Nothing else lives here.

    perfscope analyze examples/tiny_transformer.py --out perfscope-out
    perfscope report perfscope-out/results.json -o report.html
    perfscope check current.json --baseline baseline.json --max-drop 5%
    perfscope ab ../base/bench/workload.py bench/workload.py --rounds 5
    perfscope trace traces/ --out perfscope-trace-out
    perfscope capture 12345 --steps 5 --out perfscope-capture

Exit codes: 0 success; 1 internal error (a perfscope bug) or, for `check`, a regression; 2 user error
(bad file, bad arguments, unusable input); 3 `check` inconclusive; 4 `check` not comparable (another kind of
machine or software than the baseline's); 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfscope._version import __version__
from perfscope.errors import (
    EXIT_INCONCLUSIVE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_COMPARABLE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USER,
    UserError,
)
from perfscope.results.constraints import MAX_SECONDS, MAX_TFLOPS

if TYPE_CHECKING:
    from perfscope.results import Results


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str, *, at_most: float | None = None) -> float:
    """A finite number > 0: inf, nan, 0 and negatives are refused (exit 2), never carried into a run."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    if at_most is not None and value > at_most:
        raise argparse.ArgumentTypeError(f"must be at most {at_most:g}, got {text}")
    return value


def _seconds(text: str) -> float:
    return _positive_float(text, at_most=MAX_SECONDS)


def _tflops(text: str) -> float:
    return _positive_float(text, at_most=MAX_TFLOPS)


# ------------------------------------------------------------------------------------------ commands


def _knob_list(values: list[str] | None) -> list[str]:
    """--only a,b --only c -> [a, b, c]."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def _cmd_analyze(args: argparse.Namespace) -> int:
    from perfscope.analyze import DEFAULT_BUDGET_S, AnalyzeOptions, analyze
    from perfscope.results.outdir import check_output_dir

    check_output_dir(args.out)  # Path("") would be the current folder
    options = AnalyzeOptions(
        workload_path=Path(args.file),
        out_dir=Path(args.out),
        device=args.device,
        steps=args.steps,
        warmup_steps=args.warmup,
        min_window_s=args.min_window,
        repeat=args.repeat,
        max_runs=args.max_runs,
        batch_size=args.batch_size,
        trial_timeout_s=args.trial_timeout,
        peak_tflops=args.peak_tflops,
        resume=args.resume,
        sweep=not args.no_sweep,
        budget_s=None if args.no_budget else args.budget or DEFAULT_BUDGET_S,
        only=_knob_list(args.only),
        skip=_knob_list(args.skip),
        capture_trace=not args.no_trace,
        launch=_launch(args),
        command=["perfscope", *sys.argv[1:]],
        parallel=_lanes(args),
    )
    return analyze(options)


def _lanes(args: argparse.Namespace) -> Any:
    """The parallel sweep's options (perfscope.lanes), or None for one run at a time."""
    if args.lanes is None and args.devices is None:
        if args.executor != "local":
            raise UserError("--executor needs --lanes N or --devices LIST")
        return None
    from perfscope.lanes.run import LaneOptions

    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    return LaneOptions(lanes=args.lanes, devices=devices, executor=args.executor, slurm_partition=args.slurm_partition,
                       slurm_gpus_per_node=args.slurm_gpus_per_node)


def _cmd_worker(args: argparse.Namespace) -> int:
    from perfscope.trial.follower import follow

    launch = _launch(args)
    if launch is None or launch.nnodes < 2 or launch.node_rank == 0:
        raise UserError("perfscope worker is for nodes 1..N-1 of a multi-node analysis: give --nnodes > 1, "
                        "--node-rank > 0 and node 0's --rdzv-endpoint")
    return follow(Path(args.file), launch, device=args.device, work_dir=Path(args.out))


def _launch(args: argparse.Namespace) -> Any:
    """torchrun's arguments for distributed runs (None: one process), checked before anything runs."""
    from perfscope.trial.launch import Launch

    if args.nproc_per_node == 1 and args.nnodes == 1:
        if args.rdzv_endpoint or args.node_rank:
            raise UserError("--rdzv-endpoint / --node-rank need --nnodes > 1 or --nproc-per-node > 1")
        return None
    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address, reachable from every node)")
    if args.node_rank >= args.nnodes:
        raise UserError(f"--node-rank {args.node_rank} must be below --nnodes {args.nnodes}")
    return Launch(nproc_per_node=args.nproc_per_node, nnodes=args.nnodes, node_rank=args.node_rank,
                  rdzv_endpoint=args.rdzv_endpoint, rdzv_backend=args.rdzv_backend,
                  collective_timeout_s=args.collective_timeout)


def _resolve_trace_paths(results: Results, results_dir: Path) -> None:
    """Trace paths are stored relative to results.json: made absolute, the report links them from wherever it
    is written (the report turns them back into paths relative to its own folder)."""
    for trial in results.trials:
        if trial.metrics is not None and trial.metrics.trace_path and not Path(trial.metrics.trace_path).is_absolute():
            trial.metrics.trace_path = str(results_dir / trial.metrics.trace_path)


def _cmd_report(args: argparse.Namespace) -> int:
    from perfscope.report import write_report
    from perfscope.results import Results
    from perfscope.results.io import STDOUT, check_writable

    if args.output is not None:
        out = args.output
    elif args.format == "md":
        out = STDOUT  # a Markdown summary is for terminals and CI logs
    else:
        out = str(Path(args.results).with_name("report.html"))
    check_writable(out)  # before the (slow) rendering
    results = Results.load(args.results)
    _resolve_trace_paths(results, Path(args.results).resolve().parent)
    write_report(results, Path(out), fmt=args.format)  # Path("-") is still "-": standard output
    if out != STDOUT:
        print(f"wrote {out}", file=sys.stderr)
    return EXIT_OK


def _cmd_trace(args: argparse.Namespace) -> int:
    from perfscope.pipeline import finish
    from perfscope.results.outdir import check_output_dir, claim_output_dir
    from perfscope.trace.inputs import check_out_apart
    from perfscope.trace.offline import trace_results

    check_output_dir(args.out)  # before the (slow) reading of the traces
    check_out_apart(Path(args.path), Path(args.out))
    results = trace_results(Path(args.path), steps=args.steps, command=["perfscope", *sys.argv[1:]])
    with claim_output_dir(args.out):
        path = finish(results, Path(args.out))
    return _print_diagnosis(results, path)


def _print_diagnosis(results: Results, path: Path) -> int:
    from perfscope.report.markdown import summary_headline, top_finding
    from perfscope.report.waterfall_chart import waterfall_lines

    top = top_finding(results)
    if top:  # what to do first, before the figures it rests on
        print(top + "\n")
    print(summary_headline(results))
    print("\n" + "\n".join(waterfall_lines(results)))
    print(f"wrote {path}, {path.with_name('report.html')}, {path.with_name('report.md')}", file=sys.stderr)
    return EXIT_OK


def _cmd_capture(args: argparse.Namespace) -> int:
    from perfscope.live.client import Target, capture
    from perfscope.pipeline import finish
    from perfscope.results.outdir import check_output_dir, claim_output_dir

    if (args.pid is None) == (args.dir is None):
        raise UserError("give the job's PID, or --dir with the control folder its ranks share (not both)")
    check_output_dir(args.out)
    with claim_output_dir(args.out):
        results, _ = capture(Target(pid=args.pid, control=args.dir and Path(args.dir)), steps=args.steps,
                             out=Path(args.out), timeout_s=args.timeout, command=["perfscope", *sys.argv[1:]])
        path = finish(results, Path(args.out))
    return _print_diagnosis(results, path)


def _max_drop(text: str) -> float:
    """'5%' -> 0.05; a bare fraction ('0.05') is accepted, a bare '5' is refused as ambiguous."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5%, got {text!r}") from None
    if not raw.endswith("%") and value >= 1:
        raise argparse.ArgumentTypeError(f"ambiguous {text!r}: write {text}% for a percentage, or a fraction < 1")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0%, 100%), got {text}")
    return value


def _structure_gates(text: str) -> tuple[Any, ...]:
    from perfscope.check.structure import parse_structure_gates

    try:
        return parse_structure_gates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_check(args: argparse.Namespace) -> int:
    from perfscope.check import GateOptions, run_gate
    from perfscope.check.history import BaselineHistory
    from perfscope.results import Results
    from perfscope.results.io import check_writable

    for output in (args.markdown, args.junit):
        if output is not None:
            check_writable(output)  # before the verdict: a PASS must not be followed by a failed write
    options = GateOptions(
        metrics=tuple(dict.fromkeys(args.metric or ["mfu"])),
        max_drop=args.max_drop,
        trial=args.trial,
        allow_mismatch=args.allow_mismatch,
        fail_on_structure=args.fail_on_structure or (),
        between_session=args.between_session,
        between_host=args.between_host,
    )
    baseline = BaselineHistory.load(args.baseline)
    current = [Results.load(path) for path in args.current]
    report = run_gate(current, baseline, options, current_source=", ".join(args.current), baseline_source=args.baseline)
    return _gate_exit(report, args)


def _gate_exit(report: Any, args: argparse.Namespace) -> int:
    """Print the gate's table, write the requested summaries, map the outcome to `check`'s exit code."""
    from perfscope.check.render import render_junit, render_markdown, render_table, write_text

    print(render_table(report), file=sys.stderr if report.outcome in ("unusable", "not_comparable") else sys.stdout)
    if args.markdown:
        write_text(args.markdown, render_markdown(report))
    if args.junit:
        write_text(args.junit, render_junit(report))
    return {"pass": EXIT_OK, "regression": EXIT_REGRESSION, "inconclusive": EXIT_INCONCLUSIVE,
            "not_comparable": EXIT_NOT_COMPARABLE}.get(
        report.outcome, EXIT_USER
    )


def _cmd_ab(args: argparse.Namespace) -> int:
    from perfscope.ab import ABOptions, run_ab
    from perfscope.results.io import check_writable
    from perfscope.results.outdir import claim_output_dir

    for output in (args.markdown, args.junit):
        if output is not None:
            check_writable(output)
    options = ABOptions(baseline_path=Path(args.baseline_file), candidate_path=Path(args.candidate_file),
                        out_dir=Path(args.out), rounds=args.rounds, device=args.device, steps=args.steps,
                        warmup_steps=args.warmup, min_window_s=args.min_window, trial_timeout_s=args.trial_timeout,
                        max_drop=args.max_drop, peak_tflops=args.peak_tflops, seed=args.seed)
    with claim_output_dir(options.out_dir):
        report = run_ab(options)
    return _gate_exit(report, args)


def _cmd_baseline(args: argparse.Namespace) -> int:
    from perfscope.check.baseline import save_baseline
    from perfscope.results.io import check_writable

    check_writable(args.to)  # before the results are loaded and merged
    mode = "save" if args.action == "save" else ("replace" if args.replace else "update")
    saved = save_baseline(args.results, args.to, mode=mode, keep=args.keep)
    for warning in saved.warnings:
        print(f"perfscope: warning: {warning}", file=sys.stderr)
    verb = {"save": "saved", "update": "updated", "replace": "replaced"}[mode] if saved.replaced or mode == "save" else "saved"
    runs = "/".join(map(str, saved.sessions))
    print(f"{verb} baseline {saved.path}: {len(saved.sessions)} session(s) of {runs} run(s) "
          f"(added trials: {', '.join(saved.trials)})")
    return EXIT_OK


def _cmd_rules(args: argparse.Namespace) -> int:
    from perfscope.errors import UserError
    from perfscope.rules import all_rules
    from perfscope.rules.docs import listing, rule_page

    rules = all_rules()
    if args.rule_id:
        rule = next((r for r in rules if r.id == args.rule_id.upper()), None)
        if rule is None:
            raise UserError(f"no rule {args.rule_id!r}; known: {', '.join(r.id for r in rules)}")
        print(rule_page(rule))
        return EXIT_OK
    print(listing(rules))
    return EXIT_OK


# ------------------------------------------------------------------------------------------ parser


def _add_launch_arguments(p: argparse.ArgumentParser) -> None:
    """torchrun's own launch arguments, passed through (docs/distributed.md)."""
    g = p.add_argument_group("distributed (each run is a torchrun job; gloo on CPU, NCCL on CUDA)")
    g.add_argument("--nproc-per-node", type=_positive_int, default=1, metavar="N", help="ranks per node (default 1)")
    g.add_argument("--nnodes", type=_positive_int, default=1, metavar="N", help="nodes (default 1)")
    g.add_argument("--node-rank", type=_non_negative_int, default=0, metavar="R",
                   help="this node's rank (node 0 runs analyze, the others `perfscope worker`)")
    g.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT", help="node 0's rendezvous address (multi-node)")
    g.add_argument("--rdzv-backend", choices=["static", "c10d"], default="static",
                   help="static (default: node ranks as given) or c10d")
    g.add_argument("--collective-timeout", type=_seconds, default=120.0, metavar="S",
                   help="seconds a collective waits for a peer before the run fails as a hang (default 120)")


def _add_lane_arguments(p: argparse.ArgumentParser) -> None:
    """The parallel sweep's lanes and executor (docs/parallel.md)."""
    g = p.add_argument_group("parallel sweep (lanes: a device and its own cores each; docs/parallel.md)")
    g.add_argument("--lanes", type=_positive_int, default=None, metavar="N",
                   help="run the sweep's pairs on N lanes at once, each on its own share of the cores")
    g.add_argument("--devices", default=None, metavar="LIST", help="one lane per GPU, e.g. 0,1,2,3")
    g.add_argument("--executor", choices=["local", "ray", "slurm"], default="local",
                   help="where the lanes' trials run: local subprocesses (default), Ray tasks, Slurm jobs (submitit)")
    g.add_argument("--slurm-partition", default=None, metavar="NAME", help="the Slurm partition for --executor slurm")
    g.add_argument("--slurm-gpus-per-node", type=_positive_int, default=None, metavar="N",
                   help="GPUs each Slurm job asks for (--executor slurm; one lane per job)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfscope",
        description="Measure which fixes make your PyTorch training faster, on your own hardware, ranked.",
    )
    parser.add_argument("--version", action="version", version=f"perfscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("analyze", help="measure a workload file and write results.json and a report")
    p.add_argument("file", help="Python file defining workload() -> perfscope.Workload")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="default: cuda if available")
    p.add_argument("--steps", type=_positive_int, default=None,
                   help="timed steps per run (default: calibrated so each run's window lasts --min-window)")
    p.add_argument("--min-window", type=_seconds, default=0.5, metavar="S",
                   help="calibration: each run's timed window lasts at least S seconds (default 0.5)")
    p.add_argument("--warmup", type=_non_negative_int, default=5, help="warm-up steps, not timed (default 5)")
    p.add_argument("--repeat", type=_positive_int, default=1, metavar="N",
                   help="runs of the baseline, each a fresh process (CI: the gate decides on run-to-run spread)")
    p.add_argument("--max-runs", type=_positive_int, default=10, metavar="N",
                   help="measurements of one undecided candidate at most during the sweep, runs measured under load included (default 10)")
    p.add_argument("--batch-size", type=_positive_int, default=None, help="override the workload's micro-batch size")
    p.add_argument("--out", default="perfscope-out", help="output folder (default perfscope-out)")
    p.add_argument("--trial-timeout", type=_seconds, default=600.0, help="seconds before a trial is killed (default 600)")
    p.add_argument("--peak-tflops", type=_tflops, default=None, help="MFU denominator in TFLOP/s (overrides the datasheet)")
    p.add_argument("--resume", action="store_true", help="keep finished trials from OUT/results.json and run the rest")
    p.add_argument("--no-sweep", action="store_true", help="measure the baseline only (what a CI job runs)")
    p.add_argument("--budget", type=_seconds, default=None, metavar="S",
                   help="wall seconds for the analysis from its first run (default 300: announced before it, kept by "
                        "the sweep, which then recommends what it decided)")
    p.add_argument("--no-budget", action="store_true", help="no time limit: the sweep runs until every knob is decided")
    p.add_argument("--only", action="append", metavar="IDS", help="comma-separated knob ids to try (see docs/sweep.md)")
    p.add_argument("--skip", action="append", metavar="IDS", help="comma-separated knob ids not to try")
    p.add_argument("--no-trace", action="store_true", help="do not capture profiler traces")
    _add_launch_arguments(p)
    _add_lane_arguments(p)
    p.set_defaults(handler=_cmd_analyze)

    p = sub.add_parser("worker", help="lend this node's ranks to a multi-node analysis run on node 0")
    p.add_argument("file", help="the same workload file node 0 analyzes (this node's copy)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="the device node 0's trials use")
    p.add_argument("--out", default="perfscope-worker", help="this node's logs and traces (default perfscope-worker)")
    _add_launch_arguments(p)
    p.set_defaults(handler=_cmd_worker)

    p = sub.add_parser("report", help="re-render a report from a results.json")
    p.add_argument("results", help="path to results.json")
    p.add_argument("-o", "--output", default=None,
                   help="output file, - for standard output (default: html next to the results, md to standard output)")
    p.add_argument("--format", choices=["html", "md"], default="html")
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("trace", help="diagnose a trace you already have (a Kineto trace or a folder of rank traces), no rerun",
                       description="Reads the trace(s), runs the rules that need only a trace and writes results.json, "
                       "report.html and report.md. Nothing is run: step times come from the trace, throughput and MFU are "
                       "unknown, findings are estimates. See docs/trace.md.")
    p.add_argument("path", help="a trace (.json, .json.gz, .pt.trace.json) or a folder of rank traces (HTA's layout)")
    p.add_argument("--out", default="perfscope-trace-out", help="output folder (default perfscope-trace-out)")
    p.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                   help="steps the trace holds, for a trace with neither ProfilerStep#N spans nor step marks (Optimizer.step, "
                        "repeated record_function spans) (default: read from them, else the whole trace as one window)")
    p.set_defaults(handler=_cmd_trace)

    p = sub.add_parser("capture", help="trace the next steps of a running job that uses perfscope's hooks, and diagnose them",
                       description="Asks the job (SIGUSR2, or a request file in the control folder its ranks share) to "
                       "trace its next steps; it keeps training. Then diagnoses the trace as `perfscope trace` does. "
                       "See docs/hooks.md, \"Capture a running job\".")
    p.add_argument("pid", nargs="?", type=_positive_int, help="the job's process ID (any rank's, on this machine)")
    p.add_argument("--dir", help="instead of a PID: the control folder the job's ranks share (Profiler(live=DIR))")
    p.add_argument("--steps", type=_positive_int, default=5, help="steps to trace (default 5)")
    p.add_argument("--out", default="perfscope-capture", help="output folder (default perfscope-capture)")
    p.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait for the trace (default 300)")
    p.set_defaults(handler=_cmd_capture)

    p = sub.add_parser(
        "check",
        help="CI gate: fail when MFU dropped beyond a tolerance since the baseline",
        description="Exit 0 no regression (the interval excludes a drop beyond --max-drop), 1 regression, 2 unusable "
        "input, 3 inconclusive (the interval is too wide to say), 4 not comparable (another kind of machine or "
        "software than the baseline's). For CI, `perfscope ab` (both revisions on one runner) is the design that "
        "can decide from its first run. "
        "The decision rule is in docs/ci-gate.md.",
    )
    p.add_argument("current", nargs="+", help="results.json of the run(s) under test (several: their runs are pooled)")
    p.add_argument("--baseline", default="perfscope-baseline.json", help="default: perfscope-baseline.json")
    p.add_argument("--max-drop", type=_max_drop, default=0.05, metavar="PCT",
                   help="tolerated worsening, e.g. 5%% (default 5%%): a fall of MFU/samples_per_s, a rise of step_time")
    p.add_argument("--metric", action="append", choices=["mfu", "samples_per_s", "step_time"],
                   help="metric to gate; repeat for several (default mfu)")
    p.add_argument("--trial", default="baseline",
                   help="configuration compared in both files, all its runs (default baseline); 'recommended' = each file's sweep pick")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="compare despite a different device, dtype, peak or workload (warns instead)")
    p.add_argument("--fail-on-structure", type=_structure_gates, default=None, metavar="KIND[,KIND]",
                   help="also fail (exit 1) on these structural changes, exactly: sync, flops, dtype, graph-breaks, "
                   "recompiles, ops, copies, memory; thresholds where amounts, e.g. flops:5%%,ops:20 "
                   "(changes are always named; see docs/ci-gate.md)")
    p.add_argument("--between-session", type=_max_drop, default=None, metavar="PCT",
                   help="state how much sessions on one host (days, jobs) differ, e.g. 2%% (an A/A measurement of this "
                   "runner), instead of estimating it from >= 5 stored sessions or assuming 5%% (0%% = one job)")
    p.add_argument("--between-host", type=_max_drop, default=None, metavar="PCT",
                   help="state how much hosts of one kind differ, e.g. 3%%, instead of estimating it from >= 5 hosts in "
                   "the history or assuming 5%%")
    p.add_argument("--markdown", metavar="FILE", default=None, help="also write a Markdown summary")
    p.add_argument("--junit", metavar="FILE", default=None, help="also write JUnit XML (one testcase per metric)")
    p.set_defaults(handler=_cmd_check)

    p = sub.add_parser(
        "ab",
        help="CI gate, A/B mode: measure the baseline revision and the candidate interleaved in this job",
        description="Runs BASELINE_FILE and CANDIDATE_FILE (the same benchmark workload at two revisions) as fresh "
        "processes on this machine, one run of each per round in a random order (warm-up runs discarded), and gates "
        "the candidate's samples/s on the paired runs: "
        "immune to machine and day offsets. Exit 0 pass (a drop beyond --max-drop is excluded), 1 regression, "
        "2 unusable input, 3 inconclusive (the verdict names the --rounds that would decide). "
        "See docs/ci-gate.md.",
    )
    p.add_argument("baseline_file", help="the baseline revision's workload file (e.g. from a git worktree of main)")
    p.add_argument("candidate_file", help="the candidate's workload file")
    p.add_argument("--rounds", type=_positive_int, default=8, metavar="N",
                   help="runs of each revision, one of each per round in a random order, after one discarded warm-up "
                   "run each (default 8; at least 2); the verdict states its power and the rounds that reach 80%%")
    p.add_argument("--seed", type=int, default=None, help="seed of the rounds' order (default: fresh, printed)")
    p.add_argument("--max-drop", type=_max_drop, default=0.05, metavar="PCT", help="tolerated fall of samples/s (default 5%%)")
    p.add_argument("--out", default="perfscope-ab", help="output folder: baseline/ and candidate/ results (default perfscope-ab)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="default: cuda if available")
    p.add_argument("--steps", type=_positive_int, default=None, help="timed steps per run (default: calibrated)")
    p.add_argument("--min-window", type=_seconds, default=0.5, metavar="S", help="each run's window lasts at least S s")
    p.add_argument("--warmup", type=_non_negative_int, default=5, help="warm-up steps, not timed (default 5)")
    p.add_argument("--trial-timeout", type=_seconds, default=600.0, help="seconds before a run is killed (default 600)")
    p.add_argument("--peak-tflops", type=_tflops, default=None, help="MFU denominator (reported, not gated)")
    p.add_argument("--markdown", metavar="FILE", default=None, help="also write a Markdown summary")
    p.add_argument("--junit", metavar="FILE", default=None, help="also write JUnit XML")
    p.set_defaults(handler=_cmd_ab)

    p = sub.add_parser("baseline", help="record the baseline results that `check` compares against")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, help_text in (("save", "store validated results.json file(s) as a new baseline (never overwrites)"),
                              ("update", "add results.json file(s) as new sessions of the baseline (--replace: restart it)")):
        a = actions.add_parser(action, help=help_text)
        a.add_argument("results", nargs="+", help="results.json file(s); each is stored as one session (one CI job)")
        a.add_argument("--to", default="perfscope-baseline.json", help="default: perfscope-baseline.json")
        a.add_argument("--keep", type=_positive_int, default=10, metavar="N",
                       help="sessions kept, the most recent (default 10)")
        a.add_argument("--replace", action="store_true", default=False,
                       help="update only: discard the stored sessions (after an intended change, a torch upgrade, new runners)")
        a.set_defaults(handler=_cmd_baseline)

    p = sub.add_parser("rules", help="list the diagnosis rules, or show one rule's documentation")
    p.add_argument("rule_id", nargs="?", help="a rule id, e.g. PS201")
    p.set_defaults(handler=_cmd_rules)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from perfscope.errors import UserError
    from perfscope.results import ResultsError

    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("perfscope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (UserError, ResultsError) as exc:
        print(f"perfscope: error: {exc}", file=sys.stderr)
        return EXIT_USER
    except Exception:  # noqa: BLE001 - last resort: say it is our bug, with the traceback to report
        print("perfscope: internal error (please report it with the traceback below):", file=sys.stderr)
        traceback.print_exc()
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

"""The `perfscope` command: parse, call the library, map outcomes to exit codes. Nothing else lives here.

Design notes: docs/internals.md."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfscope.cli_parser import build_parser
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
from perfscope.wording import words

if TYPE_CHECKING:
    from perfscope.results import Results


# ------------------------------------------------------------------------------------------ commands


def _knob_list(values: list[str] | None) -> list[str]:
    """--only a,b --only c -> [a, b, c]."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def _cmd_analyze(args: argparse.Namespace) -> int:
    from perfscope.analyze import DEFAULT_BUDGET_S, AnalyzeOptions, analyze
    from perfscope.results.outdir import check_output_dir

    check_output_dir(args.out)  # Path("") would be the current folder
    options = AnalyzeOptions(
        workload_path=Path(args.file), out_dir=Path(args.out), device=args.device, steps=args.steps,
        warmup_steps=args.warmup, min_window_s=args.min_window, repeat=args.repeat, max_runs=args.max_runs,
        batch_size=args.batch_size, trial_timeout_s=args.trial_timeout, peak_tflops=args.peak_tflops, resume=args.resume,
        sweep=not args.no_sweep, budget_s=None if args.no_budget else args.budget or DEFAULT_BUDGET_S,
        only=_knob_list(args.only), skip=_knob_list(args.skip), capture_trace=not args.no_trace, launch=_launch(args),
        command=["perfscope", *sys.argv[1:]], parallel=_lanes(args))
    return analyze(options)


def _lanes(args: argparse.Namespace) -> Any:
    """The parallel sweep's options (perfscope.lanes), or None for one run at a time."""
    if args.lanes is None and args.devices is None:
        if args.executor != "local":
            raise UserError("--executor needs --lanes N or --devices LIST")
        return None
    from perfscope.lanes.sweep import LaneOptions

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
                             out=Path(args.out), timeout_s=args.timeout, command=["perfscope", *sys.argv[1:]],
                             memory=args.memory)
        path = finish(results, Path(args.out))
    return _print_diagnosis(results, path)


def _cmd_check(args: argparse.Namespace) -> int:
    from perfscope.check import GateOptions, run_gate
    from perfscope.check.baseline import BaselineHistory
    from perfscope.results import Results

    _check_gate_outputs(args)
    options = GateOptions(metrics=tuple(dict.fromkeys(args.metric or ["mfu"])), max_drop=args.max_drop, trial=args.trial,
                          allow_mismatch=args.allow_mismatch, fail_on_structure=args.fail_on_structure or (),
                          between_session=args.between_session, between_host=args.between_host)
    baseline = BaselineHistory.load(args.baseline)
    current = [Results.load(path) for path in args.current]
    report = run_gate(current, baseline, options, current_source=", ".join(args.current), baseline_source=args.baseline)
    return _gate_exit(report, args)


def _check_gate_outputs(args: argparse.Namespace) -> None:
    """Before the verdict: a PASS must not be followed by a failed write."""
    from perfscope.results.io import check_writable

    for output in (args.markdown, args.junit):
        if output is not None:
            check_writable(output)


def _gate_exit(report: Any, args: argparse.Namespace) -> int:
    """Print the gate's table, write the requested summaries, map the outcome to `check`'s exit code."""
    from perfscope.check.render import render_junit, render_markdown, render_table, write_text

    print(render_table(report), file=sys.stderr if report.outcome in ("unusable", "not_comparable") else sys.stdout)
    if args.markdown:
        write_text(args.markdown, render_markdown(report))
    if args.junit:
        write_text(args.junit, render_junit(report))
    return {"pass": EXIT_OK, "regression": EXIT_REGRESSION, "inconclusive": EXIT_INCONCLUSIVE,
            "not_comparable": EXIT_NOT_COMPARABLE}.get(report.outcome, EXIT_USER)


def _cmd_ab(args: argparse.Namespace) -> int:
    from perfscope.ab import ABOptions, run_ab
    from perfscope.results.outdir import claim_output_dir

    _check_gate_outputs(args)
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
        print(f"perfscope: warning: {words(warning)}", file=sys.stderr)
    verb = {"save": "saved", "update": "updated", "replace": "replaced"}[mode] if saved.replaced or mode == "save" else "saved"
    runs = "/".join(map(str, saved.sessions))
    print(f"{verb} baseline {saved.path}: {len(saved.sessions)} session(s) of {runs} run(s) "
          f"(added trials: {', '.join(saved.trials)})")
    return EXIT_OK


def _cmd_rules(args: argparse.Namespace) -> int:
    from perfscope.rules import all_rules, rule
    from perfscope.rules.docs import listing, rule_page

    rules = all_rules()
    if args.rule_id:
        try:
            print(rule_page(rule(args.rule_id.upper())))
        except KeyError:
            raise UserError(f"no rule {args.rule_id!r}; known: {', '.join(r.id for r in rules)}") from None
    else:
        print(listing(rules))
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "analyze": _cmd_analyze, "worker": _cmd_worker, "report": _cmd_report, "trace": _cmd_trace, "capture": _cmd_capture,
    "check": _cmd_check, "ab": _cmd_ab, "baseline": _cmd_baseline, "rules": _cmd_rules,
}
"""What each subcommand of perfscope.cli_parser runs."""


def main(argv: Sequence[str] | None = None) -> int:
    from perfscope.results import ResultsError

    parser = build_parser()
    args = parser.parse_args(argv)
    handler = COMMANDS[args.command]
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

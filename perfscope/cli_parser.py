"""What the `perfscope` command accepts: its subcommands, their arguments, and the argument types that refuse bad input
(exit 2) before anything runs. perfscope.cli maps each subcommand to what it does.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from perfscope._version import __version__
from perfscope.results.constraints import MAX_SECONDS, MAX_TFLOPS

__all__ = ["build_parser"]


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"
    return parse


_positive_int, _non_negative_int = _int_at_least(1), _int_at_least(0)


def _float_up_to(at_most: float) -> Callable[[str], float]:
    """A finite number in (0, at_most]: inf, nan, 0 and negatives are refused (exit 2), never carried into a run."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        if value > at_most:
            raise argparse.ArgumentTypeError(f"must be at most {at_most:g}, got {text}")
        return value

    return parse


_seconds, _tflops = _float_up_to(MAX_SECONDS), _float_up_to(MAX_TFLOPS)


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


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How each run is measured: `analyze` and `ab` alike."""
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="default: cuda if available")
    p.add_argument("--steps", type=_positive_int, default=None,
                   help="timed steps per run (default: calibrated so each run's window lasts --min-window)")
    p.add_argument("--min-window", type=_seconds, default=0.5, metavar="S",
                   help="calibration: each run's timed window lasts at least S seconds (default 0.5)")
    p.add_argument("--warmup", type=_non_negative_int, default=5, help="warm-up steps, not timed (default 5)")
    p.add_argument("--trial-timeout", type=_seconds, default=600.0, help="seconds before a run is killed (default 600)")
    p.add_argument("--peak-tflops", type=_tflops, default=None,
                   help="MFU denominator in TFLOP/s (overrides the datasheet; reported, never gated)")


def _add_gate_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", metavar="FILE", default=None, help="also write a Markdown summary")
    p.add_argument("--junit", metavar="FILE", default=None, help="also write JUnit XML (one testcase per metric)")


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
    _add_run_arguments(p)
    p.add_argument("--repeat", type=_positive_int, default=1, metavar="N",
                   help="runs of the baseline, each a fresh process (CI: the gate decides on run-to-run spread)")
    p.add_argument("--max-runs", type=_positive_int, default=10, metavar="N",
                   help="measurements of one undecided candidate at most during the sweep, runs measured under load included (default 10)")
    p.add_argument("--batch-size", type=_positive_int, default=None, help="override the workload's micro-batch size")
    p.add_argument("--out", default="perfscope-out", help="output folder (default perfscope-out)")
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

    p = sub.add_parser("worker", help="lend this node's ranks to a multi-node analysis run on node 0")
    p.add_argument("file", help="the same workload file node 0 analyzes (this node's copy)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="the device node 0's trials use")
    p.add_argument("--out", default="perfscope-worker", help="this node's logs and traces (default perfscope-worker)")
    _add_launch_arguments(p)

    p = sub.add_parser("report", help="re-render a report from a results.json")
    p.add_argument("results", help="path to results.json")
    p.add_argument("-o", "--output", default=None,
                   help="output file, - for standard output (default: html next to the results, md to standard output)")
    p.add_argument("--format", choices=["html", "md"], default="html")

    p = sub.add_parser("trace", help="diagnose a trace you already have (a Kineto trace or a folder of rank traces), no rerun",
                       description="Reads the trace(s), runs the rules that need only a trace and writes results.json, "
                       "report.html and report.md. Nothing is run: step times come from the trace, throughput and MFU are "
                       "unknown, findings are estimates. See docs/trace.md.")
    p.add_argument("path", help="a trace (.json, .json.gz, .pt.trace.json) or a folder of rank traces (HTA's layout)")
    p.add_argument("--out", default="perfscope-trace-out", help="output folder (default perfscope-trace-out)")
    p.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                   help="steps the trace holds, for a trace with neither ProfilerStep#N spans nor step marks (Optimizer.step, "
                        "repeated record_function spans) (default: read from them, else the whole trace as one window)")

    p = sub.add_parser("capture", help="trace the next steps of a running job that uses perfscope's hooks, and diagnose them",
                       description="Asks the job (SIGUSR2, or a request file in the control folder its ranks share) to "
                       "trace its next steps; it keeps training. Then diagnoses the trace as `perfscope trace` does. "
                       "See docs/hooks.md, \"Capture a running job\".")
    p.add_argument("pid", nargs="?", type=_positive_int, help="the job's process ID (any rank's, on this machine)")
    p.add_argument("--dir", help="instead of a PID: the control folder the job's ranks share (Profiler(live=DIR))")
    p.add_argument("--steps", type=_positive_int, default=5, help="steps to trace (default 5)")
    p.add_argument("--out", default="perfscope-capture", help="output folder (default perfscope-capture)")
    p.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait for the trace (default 300)")
    p.add_argument("--memory", action="store_true", help="also profile memory: the bytes by category (parameters, "
                   "gradients, optimizer state, activations, ...) and the one holding the peak; a larger, slower window")

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
    _add_gate_outputs(p)

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
    _add_run_arguments(p)
    _add_gate_outputs(p)

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

    p = sub.add_parser("rules", help="list the diagnosis rules, or show one rule's documentation")
    p.add_argument("rule_id", nargs="?", help="a rule id, e.g. PS201")

    return parser



"""The `perfscope` command: parse, call the library, map outcomes to exit codes. Nothing else lives here.

    perfscope analyze examples/tiny_transformer.py --out perfscope-out
    perfscope report perfscope-out/results.json -o report.html
    perfscope check current.json --baseline baseline.json --max-drop 5%

Exit codes: 0 success; 1 internal error (a perfscope bug) or, for `check`, a regression; 2 user error
(bad file, bad arguments, unusable input); 3 `check` inconclusive; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from perfscope import __version__

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_INTERRUPTED = 130


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


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


# ------------------------------------------------------------------------------------------ commands


def _cmd_analyze(args: argparse.Namespace) -> int:
    from perfscope.analyze import AnalyzeOptions, analyze

    options = AnalyzeOptions(
        workload_path=Path(args.file),
        out_dir=Path(args.out),
        device=args.device,
        steps=args.steps,
        warmup_steps=args.warmup,
        batch_size=args.batch_size,
        trial_timeout_s=args.trial_timeout,
        peak_tflops=args.peak_tflops,
        resume=args.resume,
        command=["perfscope", *sys.argv[1:]],
    )
    return analyze(options)


def _cmd_report(args: argparse.Namespace) -> int:
    from perfscope.report import write_report
    from perfscope.results import Results

    results = Results.load(args.results)
    default_name = "report.md" if args.format == "md" else "report.html"
    out = Path(args.output) if args.output else Path(args.results).with_name(default_name)
    write_report(results, out, fmt=args.format)
    print(f"wrote {out}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ parser


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
    p.add_argument("--steps", type=_positive_int, default=20, help="measured steps per trial (default 20)")
    p.add_argument("--warmup", type=_non_negative_int, default=5, help="warm-up steps, not timed (default 5)")
    p.add_argument("--batch-size", type=_positive_int, default=None, help="override the workload's micro-batch size")
    p.add_argument("--out", default="perfscope-out", help="output folder (default perfscope-out)")
    p.add_argument("--trial-timeout", type=_positive_float, default=600.0, help="seconds before a trial is killed (default 600)")
    p.add_argument("--peak-tflops", type=_positive_float, default=None, help="MFU denominator in TFLOP/s (overrides the datasheet)")
    p.add_argument("--resume", action="store_true", help="keep finished trials from OUT/results.json and run the rest")
    p.set_defaults(handler=_cmd_analyze)

    p = sub.add_parser("report", help="re-render a report from a results.json")
    p.add_argument("results", help="path to results.json")
    p.add_argument("-o", "--output", default=None, help="output file (default: next to the results)")
    p.add_argument("--format", choices=["html", "md"], default="html")
    p.set_defaults(handler=_cmd_report)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from perfscope.results import ResultsError
    from perfscope.workload import UserError

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

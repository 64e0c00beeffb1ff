"""The parallel sweep's wall time with 1 and 2 lanes on this machine (the same analysis, one after the other).

    python benchmarks/lanes_cpu.py [--example FILE] [--only IDS] [--lanes 1,2 | --devices 0,1,2,3] [--executor local]

Prints, per lane count: the sweep's wall time (sweep.parallel.wall_s: the A/A check included), the sum of its runs'
wall times (what they would take one after another), the runs, the recommendation, and the load average before and
after (on a shared machine the figures move with the neighbours' load; say it beside them). On a GPU machine with
several GPUs run it with --devices instead (see ../shared/gpu-acceptance.md) before anything else.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfscope.results import Results

DEFAULT_ONLY = "grad_accum,gc_freeze,amp_bf16,fused_optimizer"


def run(example: Path, lanes: str, executor: str, only: str, extra: list[str], device: str = "cpu") -> str:
    out = Path(tempfile.mkdtemp(prefix=f"perfscope-lanes{lanes.replace(',', '_')}-"))
    flag = ["--devices", lanes] if "," in lanes else ["--lanes", lanes]
    load = os.getloadavg()[0]
    start = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "perfscope", "analyze", str(example), "--device", device, "--out",
                           str(out), "--only", only, "--no-trace", *flag, "--executor", executor, *extra],
                          cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - start
    if code != 0:
        return f"{lanes} lane(s): analyze exited with {code} (see {out})"
    results = Results.load(out / "results.json")
    sweep = results.sweep
    parallel = sweep.parallel if sweep else None
    runs = sum(1 for t in results.trials if t.lane is not None)
    excluded = sum(1 for t in results.trials if t.excluded)
    return (f"{lanes} lane(s): sweep {parallel.wall_s:.0f} s wall (whole analysis {wall:.0f} s), its runs one after "
            f"another {parallel.sequential_estimate_s:.0f} s; {runs} runs on lanes ({excluded} excluded as contended); "
            f"A/A spread {parallel.aa_spread if parallel.aa_spread is not None else 'n/a'}; recommended "
            f"{sweep.recommended_knobs or 'the baseline'}; load average {load:.1f} -> {os.getloadavg()[0]:.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=ROOT / "tests" / "workloads" / "step_pause.py")
    parser.add_argument("--only", default=DEFAULT_ONLY)
    parser.add_argument("--lanes", default="1,2", help="lane counts to compare, e.g. 1,2")
    parser.add_argument("--devices", default=None, help="a GPU machine: 1 lane, then one lane per device (e.g. 0,1,2,3)")
    parser.add_argument("--executor", default="local")
    parser.add_argument("--extra", default="--max-runs 3 --steps 6 --warmup 2", help="more analyze arguments")
    args = parser.parse_args()
    print(f"{args.example.name}, --only {args.only}, {args.extra}, executor {args.executor}, "
          f"{len(os.sched_getaffinity(0))} cores")
    for lanes in (["1", args.devices] if args.devices else args.lanes.split(",")):
        print(run(args.example, lanes, args.executor, args.only, args.extra.split(), "cuda" if args.devices else "cpu"),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

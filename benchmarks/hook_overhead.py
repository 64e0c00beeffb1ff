"""What perfscope's hooks cost a user's loop, measured process against process.

    python benchmarks/hook_overhead.py --pairs 8                       # compute- and data-bound loops, CPU
    python benchmarks/hook_overhead.py --pairs 8 --pin-allocator       # glibc malloc thresholds pinned (see below)

Each run is a fresh process of benchmarks/overhead_loop.py: the same user loop either without perfscope
imported at all ("plain") or with `perfscope.Profiler` at its defaults ("hooks"), timing its own steps
60..960 with the host clock, as its author would. Runs alternate plain, hooks, plain, hooks, ... (order
flipped every other pair), so slow drift of the machine hits both. Each pair gives one ratio (hooks / plain
throughput); the figure is their geometric mean with a t-interval over pairs — processes, not steps, are the
independent evidence (issue 10: an in-process comparison cannot see what the profiler leaves behind).

The allocator lottery. On Linux/glibc a CPU training process lands, at random, in a state where freed tensor
memory is trimmed back to the kernel and faulted in again every step (glibc's adaptive mmap/trim thresholds):
the same plain loop then spends ~1 ms/step more in the kernel. Any perturbation of the allocation pattern can
flip a process into that state — a FLOP-counting step under a TorchDispatchMode does so often. The report
prints each run's kernel (system) CPU share so the state is visible; `--pin-allocator` sets
MALLOC_TRIM_THRESHOLD_/MALLOC_MMAP_THRESHOLD_ (fixed thresholds) for both sides to isolate the hooks' own cost.
Targets: ≤ 2% on CPU, ≤ 1% on a GPU, at defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "benchmarks" / "overhead_loop.py"
PINNED = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30)}


def run(loop: str, mode: str, steps: int, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, str(LOOP), "--loop", loop, "--mode", mode, "--steps", str(steps)],
                         check=True, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


def kernel_ms(row: dict) -> float:
    """Kernel (system) CPU per step: ~0 normally, ~1 ms when the process lost the allocator lottery."""
    return row["kernel_cpu_s"] / row["steps"] * 1e3


def t_interval(logs: list[float]) -> tuple[float, float, float]:
    from scipy.stats import t

    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), 0.0, math.inf
    half = t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--loops", default="compute,data")
    parser.add_argument("--mode", default="hooks", choices=("hooks", "hooks-nosampler", "hooks-noflops"))
    parser.add_argument("--pin-allocator", action="store_true")
    args = parser.parse_args()
    env = PINNED if args.pin_allocator else {}

    print(f"# python benchmarks/hook_overhead.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, python {platform.python_version()}")
    summary = []
    for loop in args.loops.split(","):
        logs = []
        start = time.monotonic()
        for i in range(args.pairs):
            order = ("plain", args.mode) if i % 2 == 0 else (args.mode, "plain")
            rows = {mode: run(loop, mode, args.steps, env) for mode in order}
            plain, hooks = rows["plain"], rows[args.mode]
            logs.append(math.log(hooks["steps_per_s"] / plain["steps_per_s"]))
            print(f"{loop:8s} pair {i + 1:2d}: plain {plain['steps_per_s']:7.1f} steps/s   {args.mode} {hooks['steps_per_s']:7.1f}   "
                  f"ratio {hooks['steps_per_s'] / plain['steps_per_s']:.3f}   kernel ms/step plain {kernel_ms(plain):.2f} "
                  f"{args.mode} {kernel_ms(hooks):.2f}", flush=True)
        ratio, low, high = t_interval(logs)
        median = math.exp(statistics.median(logs))
        summary.append((loop, ratio, low, high, median, time.monotonic() - start))
    print()
    target = 0.02
    for loop, ratio, low, high, median, wall in summary:
        verdict = "PASS" if low >= 1 - target else ("FAIL" if high < 1 - target else "UNDECIDED (more pairs)")
        print(f"{loop:8s}: {args.mode}/plain throughput {ratio:.4f} (95% CI {low:.4f}-{high:.4f}; median pair {median:.4f}); "
              f"cost {1 - ratio:+.2%}; target <= {target:.0%} -> {verdict}   ({wall:.0f} s)")


if __name__ == "__main__":
    main()

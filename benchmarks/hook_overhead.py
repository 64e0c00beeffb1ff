"""What perfscope's hooks cost a user's loop, measured process against process.

    python benchmarks/hook_overhead.py --pairs 8                       # compute- and data-bound loops, CPU
    python benchmarks/hook_overhead.py --pairs 3 --loops compute --steps 9000   # a >= 30 s run (unloaded machine)
    python benchmarks/hook_overhead.py --pairs 8 --pin-allocator       # glibc malloc thresholds pinned (see below)
    python benchmarks/hook_overhead.py --pairs 8 --no-ceiling-cache    # the CPU matmul ceiling measured every run

Each run is a fresh process of benchmarks/overhead_loop.py: the same user loop either without perfscope
imported at all ("plain") or with `perfscope.Profiler` at its defaults ("hooks"). Figures per pair:
- whole run: the process's wall clock as the user waits for it, timed here from spawn to exit — interpreter
  and torch start-up (both sides), perfscope's import, the Profiler's construction, warm-up, the FLOP-counting
  step, 60 + --steps steps and `prof.save()` (results.json + report) — the overhead a user pays (issue 25, item 7);
- whole-run CPU: the same processes' CPU seconds (user + system), far less inflated than the wall clock when
  other work shares the cores;
- steps: the loop's own host-clock time of its timed steps, as its author would time it (the per-step cost);
- one-time costs: import, construction, the untimed steps' extra wall time over plain's (warm-up, the
  FLOP-counting step) and save(), each as the hooks process measured it, and their total as a share of the run.
Runs alternate plain, hooks, plain, hooks, ... (order flipped every other pair), so slow drift of the machine
hits both. Each pair gives one ratio (plain / hooks wall time, i.e. hooks / plain throughput); the figure is
their geometric mean with a t-interval over pairs — processes, not steps, are the independent evidence.
The benchmark uses a fresh ceiling cache (perfscope.measure.ceiling_cache): its first hooks run, unpaired and
printed as "cold cache", measures the CPU matmul ceiling as a user's first run on a machine does; the pairs
then read it, as every later run on that machine does.

The allocator lottery. On Linux/glibc a CPU training process lands, at random, in a state where freed tensor
memory at the top of the heap is trimmed back to the kernel (brk) and faulted in again every step. Measured
(gdb on glibc's `mp_` at the end of each run): every process of the compute loop, plain or hooks, ends with the
same dynamic thresholds — mmap 1.9 MB (the largest mmapped chunk freed so far), trim 3.85 MB (twice that) —
while each step frees ~4 MB of temporaries (strace: brk shrinks of 4.0-5.2 MB): right at the trim threshold,
so whether the top of the heap is returned each step depends on the heap's layout. The state is read
without depending on the machine's load as minor page faults per timed step (~0 vs 100-900), printed per run;
processes with more than `SLOW_STATE_FAULTS` are counted per side, and the step rate in each state is shown.
Which hooks action causes it (benchmarks/allocator_state.py, faults of every step, 10 processes per mode):
none alone. Plain processes enter it too (7/20; 14/26 earlier), and both plain and hooks processes can enter
it mid-run (at steps 86-272 of 300), not only at the warm-up or the FLOP-counting step; hooks 8/10, without the
sampler 7/10, without the FLOP count 6/10, without both 4/10 (8/10 in an earlier series): each action that
allocates adds chances, none decides. `--pin-allocator` sets MALLOC_TRIM_THRESHOLD_/MALLOC_MMAP_THRESHOLD_
(fixed thresholds) for both sides to isolate the hooks' own cost; perfscope never changes them in a user's
process. perfscope is imported at the top of the loop's script, as users write it; `--late-import` imports it
after the model is built. Targets: ≤ 2% on CPU, ≤ 1% on a GPU, at defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfscope.cache_dir import DIR_ENV  # noqa: E402

CACHE_ENV = "PERFSCOPE_CEILING_CACHE"
"""perfscope.measure.ceiling_cache.CACHE_ENV (not imported: that module loads torch into this parent process)."""
LOOP = ROOT / "benchmarks" / "overhead_loop.py"
PINNED = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30)}
SLOW_STATE_FAULTS = 20.0
"""Minor faults per step above which a process is in the slow allocator state (~0 otherwise)."""


def run(loop: str, mode: str, steps: int, env: dict[str, str], *, late_import: bool = False) -> dict:
    """One fresh process; adds ``process_wall_s``: its wall clock from spawn to exit, and ``process_cpu_total_s``:
    the CPU time (user + system: its threads and the children it waited for) it used, which other sessions' load
    on the cores inflates far less than the wall clock."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    where = [] if late_import else ["--import-first"]
    out = subprocess.run([sys.executable, str(LOOP), "--loop", loop, "--mode", mode, "--steps", str(steps), *where],
                         check=True, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_wall_s": wall, "process_cpu_total_s": cpu}


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


def verdict(low: float, high: float, target: float) -> str:
    return "PASS" if low >= 1 - target else ("FAIL" if high < 1 - target else "UNDECIDED (more pairs)")


def state_rates(rows: list[dict]) -> str:
    """Median timed-step rate of the runs in each allocator state: the state's own cost, apart from the hooks'."""
    parts = []
    for name, slow in (("fast", False), ("slow", True)):
        rates = [r["steps_per_s"] for r in rows if (r["minor_faults_per_step"] > SLOW_STATE_FAULTS) == slow]
        parts.append(f"{name} {statistics.median(rates):.1f}/s (n={len(rates)})" if rates else f"{name} - (n=0)")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=900, help="timed steps per run (60 untimed ones come first)")
    parser.add_argument("--loops", default="compute,data")
    parser.add_argument("--mode", default="hooks", choices=("hooks", "hooks-nosampler", "hooks-noflops", "hooks-bare"))
    parser.add_argument("--pin-allocator", action="store_true")
    parser.add_argument("--late-import", action="store_true",
                        help="import perfscope after the model is built (default: at the top, where users import)")
    parser.add_argument("--no-ceiling-cache", action="store_true",
                        help="measure the CPU matmul ceiling in every run (PERFSCOPE_CEILING_CACHE=0), as before the cache")
    args = parser.parse_args()
    env = dict(PINNED) if args.pin_allocator else {}
    cache = tempfile.TemporaryDirectory(prefix="perfscope-cache-")  # a fresh cache: the first hooks run fills it
    env[DIR_ENV] = cache.name
    # This checkout's perfscope, not whatever an editable install maps `perfscope` to.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if args.no_ceiling_cache:
        env[CACHE_ENV] = "0"

    print(f"# python benchmarks/hook_overhead.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, python {platform.python_version()}")
    summary = []
    for loop in args.loops.split(","):
        start = time.monotonic()
        if not args.no_ceiling_cache:
            cold = run(loop, args.mode, args.steps, env, late_import=args.late_import)
            print(f"{loop:8s} cold cache (first run on this machine configuration, unpaired): whole run "
                  f"{cold['process_wall_s']:5.2f} s, save {cold.get('save_s', 0):.2f} s; ceiling: {cold.get('ceiling_how', '')}",
                  flush=True)
        whole, cpu, steps, plain_rows, hooks_rows, same_state = [], [], [], [], [], []
        phases: dict[str, list[float]] = {"import_s": [], "construct_s": [], "untimed steps extra_s": [], "save_s": []}
        for i in range(args.pairs):
            order = ("plain", args.mode) if i % 2 == 0 else (args.mode, "plain")
            rows = {mode: run(loop, mode, args.steps, env, late_import=args.late_import) for mode in order}
            plain, hooks = rows["plain"], rows[args.mode]
            plain_rows.append(plain)
            hooks_rows.append(hooks)
            whole.append(math.log(plain["process_wall_s"] / hooks["process_wall_s"]))
            steps.append(math.log(hooks["steps_per_s"] / plain["steps_per_s"]))
            cpu.append(math.log(plain["process_cpu_total_s"] / hooks["process_cpu_total_s"]))
            if (plain["minor_faults_per_step"] > SLOW_STATE_FAULTS) == (hooks["minor_faults_per_step"] > SLOW_STATE_FAULTS):
                same_state.append(whole[-1])
            phases["import_s"].append(hooks.get("import_s", 0.0))
            phases["construct_s"].append(hooks.get("construct_s", 0.0))
            phases["untimed steps extra_s"].append(hooks["untimed_steps_s"] - plain["untimed_steps_s"])
            phases["save_s"].append(hooks.get("save_s", 0.0))
            print(f"{loop:8s} pair {i + 1:2d}: whole run plain {plain['process_wall_s']:6.2f} s {args.mode} "
                  f"{hooks['process_wall_s']:6.2f} s ratio {math.exp(whole[-1]):.3f} | CPU plain "
                  f"{plain['process_cpu_total_s']:6.2f} s {args.mode} {hooks['process_cpu_total_s']:6.2f} s ratio "
                  f"{math.exp(cpu[-1]):.3f} | steps plain {plain['steps_per_s']:6.1f}/s "
                  f"{args.mode} {hooks['steps_per_s']:6.1f}/s ratio {math.exp(steps[-1]):.3f} | faults/step plain "
                  f"{plain['minor_faults_per_step']:5.0f} {args.mode} {hooks['minor_faults_per_step']:5.0f} | "
                  f"import {hooks.get('import_s', 0):.2f} s construct {hooks.get('construct_s', 0):.2f} s "
                  f"untimed steps +{phases['untimed steps extra_s'][-1]:.2f} s save {hooks.get('save_s', 0):.2f} s", flush=True)
        summary.append((loop, whole, cpu, steps, plain_rows, hooks_rows, same_state, phases, time.monotonic() - start))
    print()
    target = 0.02
    for loop, whole, cpu, steps, plain_rows, hooks_rows, same_state, phases, wall in summary:
        plain_s = statistics.fmean(r["process_wall_s"] for r in plain_rows)
        for label, logs in (("whole run", whole), ("whole-run CPU", cpu), ("timed steps", steps)):
            ratio, low, high = t_interval(logs)
            print(f"{loop:8s} {label:12s}: {args.mode}/plain throughput {ratio:.4f} (95% CI {low:.4f}-{high:.4f}); "
                  f"cost {1 - ratio:+.2%}; target <= {target:.0%} -> {verdict(low, high, target)}"
                  + {"whole run": f"   (plain whole run {plain_s:.1f} s, {args.steps + 60} steps)",
                     "whole-run CPU": "   (CPU seconds of the process: plain / hooks)",
                     "timed steps": "   (per-step cost)"}[label])
        if len(same_state) >= 2:
            ratio, low, high = t_interval(same_state)
            print(f"{loop:8s} whole run, pairs in the same allocator state ({len(same_state)}/{len(whole)}): "
                  f"{ratio:.4f} (95% CI {low:.4f}-{high:.4f}); cost {1 - ratio:+.2%}")
        means = {k[:-2]: statistics.fmean(v) for k, v in phases.items()}
        fixed = sum(means.values())
        print(f"{loop:8s} one-time costs (mean, warm cache): " + ", ".join(f"{k} {v:.3f} s" for k, v in means.items())
              + f"; total {fixed:.2f} s = {fixed / plain_s:.1%} of this {plain_s:.1f} s run")
        slow_plain = sum(r["minor_faults_per_step"] > SLOW_STATE_FAULTS for r in plain_rows)
        slow_hooks = sum(r["minor_faults_per_step"] > SLOW_STATE_FAULTS for r in hooks_rows)
        print(f"{loop:8s} slow allocator state (> {SLOW_STATE_FAULTS:g} faults/step): plain {slow_plain}/{len(plain_rows)}, "
              f"{args.mode} {slow_hooks}/{len(hooks_rows)}; step rate by state: plain {state_rates(plain_rows)}; "
              f"{args.mode} {state_rates(hooks_rows)}   ({wall:.0f} s)")
    cache.cleanup()


if __name__ == "__main__":
    main()

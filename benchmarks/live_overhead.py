"""What `perfscope capture`'s listener (between captures) and the watch cost a user's loop, process against process.

    python benchmarks/live_overhead.py --pairs 4 --steps 900          # CPU, the compute loop of overhead_loop.py
    python benchmarks/live_overhead.py --pairs 4 --pin-allocator      # glibc's thresholds pinned (hook_overhead.py)

Two comparisons, each run a fresh process of benchmarks/overhead_loop.py (the same MLP loop, perfscope.Profiler at
its defaults), in alternating order (flipped every other pair) so slow drift of the machine hits both sides:
- listener: `live=False` (no signal handler, no registration) against the default `live=True`: between captures the
  loop reads one attribute per step; the registration happens once, after warm-up;
- watch: the default against `watch=True`: each timed step read at its end and fed to the CUSUM (a log, a few
  float operations) — and to nothing else.
Per pair one ratio of the loop's own timed-step rate (its host clock around steps [60, 60 + --steps)) and one of
the process's CPU seconds; the figure is their geometric mean with a t-interval over pairs (processes are the
evidence, not steps). Then, in this process, the added hot-path work alone, timed over 10⁶ calls: the flag read
and one Watch.add, against the loop's step time. Targets: within the hooks' own (≤ 2 % on CPU).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.hook_overhead import PINNED, run, t_interval  # noqa: E402

PAIRS = {"listener": ("hooks-nolive", "hooks"), "watch": ("hooks", "hooks-watch")}


def hot_path_ns() -> tuple[float, float]:
    """ns per step: the listener's flag read (LiveControl.flag, as the Profiler does twice a step) and Watch.add."""
    from perfscope.hooks.ondemand import LiveControl
    from perfscope.hooks.watch import Watch, WatchConfig
    from perfscope.measure.window import StepRecord

    live = LiveControl(None, rank=0, steps=lambda: 0, enabled=False)
    n = 1_000_000
    t0 = time.perf_counter_ns()
    for _ in range(n):
        if live.flag:
            pass
        if live.flag:
            pass
    flag_ns = (time.perf_counter_ns() - t0) / n
    watch = Watch(WatchConfig(out=os.devnull), capture=lambda steps, d: False)
    records = [StepRecord(i, 0.01 * (1 + 0.01 * (i % 7)), 0.0, 0.0, 64, 1) for i in range(n)]
    t0 = time.perf_counter_ns()
    for r in records:
        watch.add(r)
    return flag_ns, (time.perf_counter_ns() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--pin-allocator", action="store_true")
    args = parser.parse_args()
    env = dict(PINNED) if args.pin_allocator else {}
    print(f"# python benchmarks/live_overhead.py {' '.join(sys.argv[1:])}")
    print(f"# {platform.machine()}, {os.cpu_count()} logical cores, python {platform.python_version()}, "
          f"load average at start {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    step_s = []
    for name, (base, other) in PAIRS.items():
        rate_logs, cpu_logs = [], []
        for pair in range(args.pairs):
            order = (base, other) if pair % 2 == 0 else (other, base)
            rows = {mode: run("compute", mode, args.steps, env) for mode in order}
            a, b = rows[base], rows[other]
            step_s.append(1 / a["steps_per_s"])
            rate_logs.append(math.log(b["steps_per_s"] / a["steps_per_s"]))
            cpu_logs.append(math.log(a["process_cpu_total_s"] / b["process_cpu_total_s"]))
            print(f"{name:8s} pair {pair + 1}: steps {base} {a['steps_per_s']:.1f}/s {other} {b['steps_per_s']:.1f}/s "
                  f"ratio {b['steps_per_s'] / a['steps_per_s']:.3f} | CPU {a['process_cpu_total_s']:.2f} s "
                  f"{b['process_cpu_total_s']:.2f} s | faults/step {a['minor_faults_per_step']:.0f} "
                  f"{b['minor_faults_per_step']:.0f}", flush=True)
        for what, logs in (("timed steps", rate_logs), ("process CPU", cpu_logs)):
            mean, low, high = t_interval(logs)
            print(f"{name:8s} {what}: {other}/{base} throughput {mean:.4f} (95% CI {low:.4f}-{high:.4f}); "
                  f"cost {(1 / mean - 1) * 100:+.2f}%")
    flag_ns, watch_ns = hot_path_ns()
    typical = sorted(step_s)[len(step_s) // 2]
    print(f"hot path in-process: flag reads {flag_ns:.0f} ns/step, Watch.add {watch_ns:.0f} ns/step; against the "
          f"loop's median step of {typical * 1e3:.1f} ms: {(flag_ns + watch_ns) / (typical * 1e9) * 100:.4f}%")


if __name__ == "__main__":
    main()

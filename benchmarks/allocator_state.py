"""Which step puts a process into glibc's slow allocator state: minor faults of every step, per process.

    python benchmarks/allocator_state.py --runs 10 --modes plain,hooks,hooks-bare --steps 300

Each run is a fresh process of benchmarks/overhead_loop.py (compute loop) with --fault-trace. A process is
"slow" when its steps from --skip on average more than SLOW faults; its onset is the first step from which
every later window of 20 steps averages more than SLOW faults, so an onset at the warm-up, the FLOP-counting step or the
sampler's start names the action that caused it (hook_overhead.py explains the state itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "benchmarks" / "overhead_loop.py"
SLOW = 20.0


def onset(faults: list[int], window: int = 20) -> int | None:
    """First step from which every following ``window``-step mean exceeds SLOW (None: never settles slow)."""
    means = [statistics.fmean(faults[i:i + window]) for i in range(len(faults) - window + 1)]
    first = None
    for i, m in enumerate(means):
        if m > SLOW:
            first = i if first is None else first
        else:
            first = None
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--modes", default="plain,hooks")
    parser.add_argument("--extra", default="", help="more arguments for overhead_loop.py, e.g. '--import-first'")
    args = parser.parse_args()
    print(f"# python benchmarks/allocator_state.py {' '.join(sys.argv[1:])}")
    modes = args.modes.split(",")
    rows: dict[str, list[tuple[float, int | None]]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode in modes:  # interleaved
            out = subprocess.run([sys.executable, str(LOOP), "--loop", "compute", "--mode", mode, "--skip", "0",
                                  "--steps", str(args.steps), "--no-save", "--fault-trace", *args.extra.split()],
                                 check=True, capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
            faults = json.loads(out.stdout.strip().splitlines()[-1])["faults_by_step"]
            rows[mode].append((statistics.fmean(faults[60:]), onset(faults)))
    for mode, got in rows.items():
        slow = [r for r in got if r[0] > SLOW]
        print(f"{mode:16s} slow {len(slow)}/{len(got)}; faults/step (steps 60+): "
              + " ".join(f"{f:.0f}" for f, _ in got) + " | onsets of the slow ones: "
              + " ".join(str(o) for f, o in got if f > SLOW))


if __name__ == "__main__":
    main()

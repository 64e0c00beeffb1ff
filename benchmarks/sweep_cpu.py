"""The full analysis of the tiny example on the CPU, with the default budget: the time it announces before its first
run, the wall time it took, the machine's load around it (other jobs slow every run), and the ranking.

    python benchmarks/sweep_cpu.py [--out DIR] [--example FILE]

Target: the analysis ends within the time it announced (the budget, 300 s by default, counts from its first run;
the probe before and the report after come on top) — the quick start's promise in the README.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.sweep_report import print_ranking

SLACK_S = 30.0
"""The probe before the first run and the rules and report after the last: outside the announced time."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=ROOT / "examples" / "tiny_transformer.py")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="perfscope-sweep-cpu-"))
    load_before = os.getloadavg()
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "perfscope", "analyze", str(args.example), "--device", "cpu", "--out", str(out)],
                          cwd=ROOT, check=False, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    load_after = os.getloadavg()
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"analyze exited with {proc.returncode}")
        return proc.returncode
    print_ranking(out / "results.json")
    announced = [line for line in proc.stderr.splitlines() if line.startswith("perfscope: expected time")]
    print("\n" + "\n".join(announced))
    match = re.search(r"expected time: (?:about )?(?:(\d+) min)? ?(?:(\d+) s)?", announced[0]) if announced else None
    expected = 60 * float(match.group(1) or 0) + float(match.group(2) or 0) if match else float("nan")
    cores = os.cpu_count() or 1
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} on {cores} cores")
    print(f"wall time of the whole analysis: {wall:.1f} s; announced {expected:.0f} s (+ ≤ {SLACK_S:.0f} s probe and report) "
          f"-> {'PASS' if wall <= expected + SLACK_S else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

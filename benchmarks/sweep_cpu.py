"""The full analysis of the tiny example on the CPU: wall time and the ranking. Target: ≤ 2 minutes on 2 cores.

    python benchmarks/sweep_cpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.sweep_report import print_ranking

TARGET_S = 120.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=ROOT / "examples" / "tiny_transformer.py")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="perfscope-sweep-cpu-"))
    start = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "perfscope", "analyze", str(args.example), "--device", "cpu", "--out", str(out)], cwd=ROOT, check=False).returncode
    wall = time.monotonic() - start
    if code != 0:
        print(f"analyze exited with {code}")
        return code
    print_ranking(out / "results.json")
    print(f"\nwall time of the whole analysis: {wall:.1f} s (target ≤ {TARGET_S:.0f} s) -> {'PASS' if wall <= TARGET_S else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

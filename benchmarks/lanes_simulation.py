"""The family-wise error and power of the parallel sweep on unequal lanes, from simulated runs fed to the real
LaneSweeper (benchmarks.lanes_model): 8 lanes whose speeds differ by up to 20 %, plus one 1.5× slower than the
median lane.

    python benchmarks/lanes_simulation.py [--sweeps 200] [--knobs 20] [--model cpu] [--max-runs 10]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.lanes_model import LaneModel, simulate_lane_sweep
from benchmarks.stat_simulation import wilson
from benchmarks.sweep_model import NOISE_MODELS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--knobs", type=int, default=20)
    parser.add_argument("--model", default="cpu", choices=sorted(NOISE_MODELS))
    parser.add_argument("--max-runs", type=int, default=10, help="runs of one candidate at most (the product's default)")
    args = parser.parse_args()
    model, lanes = NOISE_MODELS[args.model], LaneModel.spread(8, spread=0.20, outlier=1.5, seed=3)
    print(f"noise model {args.model}, --max-runs {args.max_runs}; lane speeds {', '.join(f'{s:.3f}' for s in lanes.speeds)} (the last: the outlier)")
    null = [simulate_lane_sweep(model, lanes, [0.0] * args.knobs, seed=s, max_runs=args.max_runs) for s in range(args.sweeps)]
    errors = sum(o.sweep.false_discoveries > 0 for o in null)
    low, high = wilson(errors, len(null))
    dropped = Counter(o.dropped for o in null)
    print(f"no-effect sweeps of {args.knobs} knobs: family-wise false verdicts {errors}/{len(null)} "
          f"({errors / len(null):.1%} [{low:.1%}, {high:.1%}]); a false recommendation in "
          f"{sum(o.sweep.recommended_false for o in null)}; runs per sweep {sum(o.sweep.runs for o in null) / len(null):.0f}")
    print(f"A/A check, lanes dropped: {dict(dropped)}")
    effects = [0.10] + [0.0] * (args.knobs - 1)
    found = [simulate_lane_sweep(model, lanes, effects, seed=10_000 + s, max_runs=args.max_runs) for s in range(args.sweeps)]
    hits = sum(o.sweep.found for o in found)
    low, high = wilson(hits, len(found))
    print(f"a +10% knob among {args.knobs - 1} no-effect ones: found in {hits}/{len(found)} ({hits / len(found):.1%} "
          f"[{low:.1%}, {high:.1%}]); recommended alone in {sum(o.sweep.recommended == ('k00',) for o in found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

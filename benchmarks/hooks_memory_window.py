"""What the hooks' memory-by-category window costs a loop: the two steps after a capture_steps trace, process by process.

    python benchmarks/hooks_memory_window.py --runs 3                       # CPU, a 2-layer d=32 encoder
    python benchmarks/hooks_memory_window.py --runs 3 --d 256 --layers 6    # a larger one

Each run is a fresh process of this file (``--child``) training a TransformerEncoder with perfscope.Profiler and
``capture_steps=(3, 4)``: step 2 is the profiler's warm-up, step 3 is traced, steps 4-5 are the memory window
(``memory=True``, the default) or two more plain steps (``memory=False``); runs alternate the two. Per run, the
window's cost is the wall time of steps 4 and 5 (host clock around the loop body and ``prof.step()``) minus twice
the median of steps 6 onward. The steps are untimed in the hooks' results either way: what this measures is the
one-off wall time the user's job pays, never a per-step cost (outside the window the loop runs as without it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def child(args: argparse.Namespace) -> None:
    import torch

    from perfscope.hooks.profiler import Profiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.TransformerEncoderLayer(args.d, 4, 2 * args.d, dropout=0.0, batch_first=True)
                                  for _ in range(args.layers)))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, args.seq, args.d)
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, capture_steps=(3, 4), memory=args.memory, count_flops=False,
                    sample_utilization=False, measure_ceiling=False, live=False)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        times.append(time.perf_counter() - t0)
    held = prof.results().trials[0].metrics.memory_categories  # type: ignore[union-attr]
    print(json.dumps({"times": times, "peak_category": held.peak_category if held else None}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="processes per side")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    costs: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * args.runs):
        memory = i % 2 == 0
        cmd = [sys.executable, __file__, "--child", "--steps", str(args.steps), "--d", str(args.d), "--layers",
               str(args.layers), "--seq", str(args.seq)] + (["--memory"] if memory else [])
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        times = out["times"]
        cost = times[4] + times[5] - 2 * statistics.median(times[6:])
        costs[memory].append(cost)
        print(f"run {i}: memory={memory} window cost {cost:.3f} s (median step {statistics.median(times[6:]) * 1e3:.1f} ms, "
              f"peak category {out['peak_category']})", flush=True)
    for memory, values in costs.items():
        print(f"memory={memory}: steps 4-5 beyond two plain steps, mean {statistics.mean(values):.3f} s "
              f"(min {min(values):.3f}, max {max(values):.3f}) over {len(values)} processes")


if __name__ == "__main__":
    main()

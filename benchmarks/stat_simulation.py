"""Error rates of the sweep's decisions, from simulated runs fed to the real decision code.

    python benchmarks/stat_simulation.py --sweeps 1000 --models cpu --max-runs 4

Per noise model (benchmarks.sweep_model.NOISE_MODELS): the family-wise error rate of ``--sweeps`` sweeps of
``--knobs`` no-effect knobs (P(any knob called faster or slower)), the rate of a recommendation with no
effect behind it, and the power (share of knobs with a true effect called faster) at 3/5/10% effects, two
effect knobs among the rest. Every rate with its Wilson 95% interval. The CI gate's rates are
benchmarks/gate_simulation.py's (through run_gate, the CLI's path).

    python benchmarks/stat_simulation.py --models "" --scales 1,3,5,8 --sweeps 1000 --bias-sweeps 400

``--scales``: the family-wise error when the candidates are that many times noisier than the baseline (the CPU
model otherwise), and the bias of the recommendation's reported gain (mean log(reported / true), from its
confirmation runs) with two +10% knobs among ``--knobs`` on the CPU model.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_model import NOISE_MODELS, simulate_sweep  # noqa: E402
from perfscope.search.sweep import SweepOptions  # noqa: E402


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, n: int) -> str:
    low, high = wilson(successes, n)
    return f"{successes:>4}/{n:<5} {successes / n:6.1%} [{low:5.1%}, {high:5.1%}]"


def scales(args: argparse.Namespace) -> None:
    """Family-wise error per candidate noise scale; power and the reported gain's bias at +10% (CPU model)."""
    cpu = NOISE_MODELS["cpu"]
    for scale in (float(x) for x in args.scales.split(",") if x):
        start = time.perf_counter()
        model = dataclasses.replace(cpu, name=f"cpu, candidates {scale:g}x noisier", candidate_scale=scale)
        null = [simulate_sweep(model, [0.0] * args.knobs, seed=seed, max_runs=args.max_runs, recommend=False)
                for seed in range(args.sweeps)]
        runs = sum(o.runs for o in null) / max(1, len(null))
        print(f"sweep  candidates {scale:g}x noisier, no effect ({args.knobs} knobs)  family-wise error  "
              f"{rate(sum(o.false_discoveries > 0 for o in null), len(null))}  ({runs:.0f} runs/sweep, "
              f"{time.perf_counter() - start:.0f} s)", flush=True)
    if not args.bias_sweeps:
        return
    outs = [simulate_sweep(cpu, [0.10, 0.10] + [0.0] * (args.knobs - 2), seed=10_000 + seed, max_runs=args.max_runs)
            for seed in range(args.bias_sweeps)]
    found, total = sum(o.found for o in outs), sum(o.effective for o in outs)
    print(f"sweep  cpu, +10% on 2 of {args.knobs} knobs  power (effect knob called faster)  {rate(found, total)}")
    bias = [math.log(o.reported_gain / o.true_gain) for o in outs if o.reported_gain and o.true_gain]
    print(f"sweep  cpu, +10% on 2 of {args.knobs} knobs  recommended  {rate(len(bias), len(outs))}; reported gain's bias "
          f"{100 * statistics.fmean(bias):+.2f} points of log gain (se {100 * statistics.stdev(bias) / math.sqrt(len(bias)):.2f})"
          f"; {sum(o.runs for o in outs) / len(outs):.0f} runs/sweep", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=1000, help="null sweeps per model")
    parser.add_argument("--power-sweeps", type=int, default=200, help="sweeps per effect size")
    parser.add_argument("--knobs", type=int, default=20)
    parser.add_argument("--max-runs", type=int, default=SweepOptions().max_runs)
    parser.add_argument("--models", default=",".join(NOISE_MODELS))
    parser.add_argument("--effects", default="0.03,0.05,0.10")
    parser.add_argument("--scales", default="", help="candidate noise scales for the family-wise error (e.g. 1,3,5,8)")
    parser.add_argument("--bias-sweeps", type=int, default=0, help="sweeps for the reported gain's bias (with --scales)")
    args = parser.parse_args()
    print(f"# python benchmarks/stat_simulation.py --sweeps {args.sweeps} --power-sweeps {args.power_sweeps} "
          f"--knobs {args.knobs} --max-runs {args.max_runs} --models '{args.models}' --effects {args.effects}"
          f" --scales '{args.scales}' --bias-sweeps {args.bias_sweeps}")
    if args.scales:
        scales(args)
    effects = [float(e) for e in args.effects.split(",") if e]
    for name in filter(None, args.models.split(",")):
        model = NOISE_MODELS[name]
        start = time.perf_counter()
        print(f"\n== {model}")
        null = [simulate_sweep(model, [0.0] * args.knobs, seed=seed, max_runs=args.max_runs) for seed in range(args.sweeps)]
        runs = sum(o.runs for o in null) / max(1, len(null))
        print(f"sweep  no effect ({args.knobs} knobs)  family-wise error (any knob faster/slower)  {rate(sum(o.false_discoveries > 0 for o in null), len(null))}")
        print(f"sweep  no effect ({args.knobs} knobs)  any knob called faster                   {rate(sum(o.false_faster > 0 for o in null), len(null))}")
        print(f"sweep  no effect ({args.knobs} knobs)  a configuration recommended               {rate(sum(o.recommended_false for o in null), len(null))}")
        print(f"sweep  no effect: {runs:.0f} runs per sweep on average (baseline runs included)")
        for effect in effects:
            outs = [simulate_sweep(model, [effect, effect] + [0.0] * (args.knobs - 2), seed=10_000 + seed, max_runs=args.max_runs)
                    for seed in range(args.power_sweeps)]
            found, total = sum(o.found for o in outs), sum(o.effective for o in outs)
            print(f"sweep  +{effect:.0%} on 2 of {args.knobs} knobs  power (effect knob called faster)     {rate(found, total)}")
            print(f"sweep  +{effect:.0%} on 2 of {args.knobs} knobs  family-wise error on the others        {rate(sum(o.false_discoveries > 0 for o in outs), len(outs))}")
            print(f"sweep  +{effect:.0%} on 2 of {args.knobs} knobs  a recommendation                      {rate(sum(bool(o.recommended) for o in outs), len(outs))}")
        print(f"({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

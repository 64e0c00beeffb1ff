"""Step-time overhead of perfscope's hooks: the same training loop with and without a Profiler, interleaved.

    python benchmarks/hook_overhead.py --example examples/tiny_transformer.py --device cpu     # target <= 2%
    python benchmarks/hook_overhead.py --example examples/gpt2_small.py --device cuda         # target <= 1%

Method (honest by construction):
- Two copies of the workload's training step (perfscope.trial.loop.TrainStep: the user's batch, precision,
  accumulation), built from the same seed. "plain" runs as is; "hooked" iterates its batches through
  `prof.wrap()` and calls `prof.step()` after every optimizer step, with the profiler's defaults
  (utilization sampling on, lazy CUDA events, FLOPs counted once).
- Warm-up: both copies run untimed steps first, past the profiler's warm-up and its FLOP-counting step,
  so the comparison is steady state. The one-time costs (the FLOP-counting step, save()) are reported apart.
- Rounds interleave the two (AB, BA, AB, ...: alternating order cancels slow drift of the machine); a round
  times `--steps` consecutive steps with one device synchronization at each end (a per-step sync would hide
  the host-side cost the hooks add on a GPU), and gives one sample: its mean step time.
- Overhead = median(hooked rounds) / median(plain rounds) - 1, with a seeded bootstrap interval
  (perfscope.stats.ratio_of_medians). The verdict is PASS only when the whole interval is under the target.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from perfscope.analyze import AnalyzeOptions, baseline_config, resolve_device
from perfscope.hooks import Profiler
from perfscope.measure.clock import synchronize
from perfscope.measure.environment import collect_environment
from perfscope.stats import ratio_of_medians, summarize
from perfscope.trial.loop import TrainStep
from perfscope.workload import load_workload

TARGETS = {"cpu": 0.02, "cuda": 0.01}


def _round(step: TrainStep, prof: Profiler | None, steps: int, device: str) -> float:
    """Mean step time of ``steps`` consecutive optimizer steps, synchronized only at the two ends."""
    gc.collect()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
        if prof is not None:
            prof.step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def isolated_cost_s(device: str, n: int = 20_000, repeats: int = 5) -> float:
    """Seconds the hooks add per step with no training work at all (wrap + step over ready batches): the floor."""
    batches = [torch.zeros(8, 4)] * n
    costs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _batch in batches:
            pass
        plain = time.perf_counter() - start
        prof = Profiler(device=device, count_flops=False, sample_utilization=False, measure_ceiling=False)
        start = time.perf_counter()
        for _batch in prof.wrap(batches):
            prof.step()
        hooked = time.perf_counter() - start
        prof.close()
        costs.append((hooked - plain) / n)
    return statistics.median(costs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", default="examples/tiny_transformer.py", help="a perfscope workload file")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per variant (each one sample)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per round")
    parser.add_argument("--warmup", type=int, default=12, help="untimed steps per variant before the rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU); default: torch's")
    parser.add_argument("--batch-size", type=int, default=None, help="override the workload's micro-batch")
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = Path(args.example).resolve()
    workload = load_workload(path)
    config = baseline_config(
        workload, AnalyzeOptions(workload_path=path, batch_size=args.batch_size, capture_trace=False), device
    )
    plain, hooked = TrainStep(workload, config), TrainStep(workload, config)
    prof = Profiler(hooked.model, optimizer=hooked.optimizer, device=device,
                    tokens_per_sample=workload.tokens_per_sample, name=workload.name or path.stem)
    if args.warmup < prof.warmup_steps + 2:
        parser.error(f"--warmup must be >= {prof.warmup_steps + 2} (the profiler's warm-up and its FLOP-counting step)")
    hooked.batches = prof.wrap(hooked.batches)  # the user's `for batch in prof.wrap(loader)`

    # Warm-up; the hooked copy's steps are timed one by one (synchronized) to show the FLOP-counting step's cost.
    warm_plain, warm_hooked = [], []
    for _ in range(args.warmup):
        warm_plain.append(_round(plain, None, 1, device))
        warm_hooked.append(_round(hooked, prof, 1, device))
    flop_step_s = warm_hooked[prof.warmup_steps]

    samples: dict[str, list[float]] = {"plain": [], "hooked": []}
    for r in range(args.rounds):
        order = (("plain", plain, None), ("hooked", hooked, prof))
        for name, step, p in order if r % 2 == 0 else order[::-1]:
            samples[name].append(_round(step, p, args.steps, device))

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        prof.save(tmp)  # its step times span the interleaved plain rounds too, so they are not quoted here
        save_s = time.perf_counter() - start

    floor_s = isolated_cost_s(device)
    plain_s, hooked_s = summarize(samples["plain"]), summarize(samples["hooked"])
    est = ratio_of_medians(samples["hooked"], samples["plain"], confidence=0.95)
    target = TARGETS.get(device, 0.02)
    overhead, low, high = est.ratio - 1, est.low - 1, est.high - 1
    verdict = "PASS" if high <= target else ("INCONCLUSIVE (interval crosses the target)" if overhead <= target else "FAIL")
    name = collect_environment(device, measure_ceiling=False).device_name
    ms = lambda s: f"{s.median * 1e3:.3f} ms (p10 {s.p10 * 1e3:.3f}, p90 {s.p90 * 1e3:.3f}, spread {s.spread:.1%})"  # noqa: E731
    lines = [
        f"hook overhead: {args.example} on {device} ({name}), torch {torch.__version__}, python {platform.python_version()}, "
        f"{torch.get_num_threads()} torch threads",
        f"command: python benchmarks/hook_overhead.py {' '.join(argv if argv is not None else sys.argv[1:])}",
        f"rounds: {args.rounds} per variant x {args.steps} steps, interleaved AB/BA; {args.warmup} untimed warm-up steps each; "
        f"micro-batch {config.micro_batch_size} x accum {config.grad_accum_steps}",
        f"plain   step time, median of round means: {ms(plain_s)}",
        f"hooked  step time, median of round means: {ms(hooked_s)}",
        f"overhead: {overhead:+.2%}  (95% bootstrap interval {low:+.2%} .. {high:+.2%})  target <= {target:.0%}: {verdict}",
        f"hook cost per step in isolation (wrap + step, no training work; median of 5 x 20,000): "
        f"{floor_s * 1e6:.1f} us = {floor_s / plain_s.median:.3%} of the plain median step",
        f"one-time costs (not in the rounds): FLOP-counting step {flop_step_s * 1e3:.1f} ms "
        f"(a plain warm-up step: {statistics.median(warm_plain[prof.warmup_steps:]) * 1e3:.1f} ms); "
        f"save() {save_s:.2f} s (environment, matmul ceiling, rules, report)",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

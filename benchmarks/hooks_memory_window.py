"""What the hooks' memory-by-category window costs a loop: the two steps after a capture_steps trace, process by process.

    python benchmarks/hooks_memory_window.py --runs 3                       # CPU, a 2-layer d=32 encoder
    python benchmarks/hooks_memory_window.py --runs 3 --d 256 --layers 6    # a larger one
    python benchmarks/hooks_memory_window.py --runs 3 --model gpt           # examples/tiny_transformer.py's TinyGPT
    python benchmarks/hooks_memory_window.py --runs 3 --model mlp           # a 20M-parameter MLP

Each run is a fresh process of this file (``--child``) training a TransformerEncoder with perfscope.Profiler and
``capture_steps=(3, 4)``: step 2 is the profiler's warm-up, step 3 is traced, steps 4-5 are the memory window
(``memory=True``) or two more plain steps (``memory=False``, the default); runs alternate the two. Per run, the
window's cost is the wall time of steps 4 and 5 (host clock around the loop body and ``prof.step()``) minus twice
the median of steps 6 onward; ``in prof.step()`` is the hooks' own time at steps 3-5 (the trace's stop and export,
then with memory=True the memory profiler's start and its end); of it, ``categorise`` is torch's memory categorisation and perfscope's breakdown
(trace/memory_categories.memory_breakdown, run synchronously in the step that ends the window). The steps are untimed in the hooks' results either way: what this measures is the
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


def _model(args: argparse.Namespace) -> tuple[object, object]:
    """(model, batch) of --model: the encoder, the tiny GPT of examples/, or a 20M-parameter MLP."""
    import torch

    if args.model == "gpt":
        from examples.tiny_transformer import SEQ, VOCAB, TinyGPT

        return TinyGPT(), torch.randint(0, VOCAB, (8, SEQ))
    if args.model == "mlp":  # 1024 → 4 × 2304 → 1024: 20.6M parameters, a batch of 64
        widths = [1024, 2304, 2304, 2304, 2304, 1024]
        layers = [m for a, b in zip(widths, widths[1:]) for m in (torch.nn.Linear(a, b), torch.nn.GELU())]
        return torch.nn.Sequential(*layers[:-1]), torch.randn(64, 1024)
    return (torch.nn.Sequential(*(torch.nn.TransformerEncoderLayer(args.d, 4, 2 * args.d, dropout=0.0, batch_first=True)
                                  for _ in range(args.layers))), torch.randn(8, args.seq, args.d))


def child(args: argparse.Namespace) -> None:
    import torch

    from perfscope.hooks.profiler import Profiler
    from perfscope.trace import memory_categories

    categorise: list[float] = []
    breakdown = memory_categories.memory_breakdown

    def timed(*a: object) -> object:
        t0 = time.perf_counter()
        try:
            return breakdown(*a)
        finally:
            categorise.append(time.perf_counter() - t0)

    memory_categories.memory_breakdown = timed  # what on_trace_ready calls in the window's last step
    torch.manual_seed(0)
    model, x = _model(args)
    opt = torch.optim.AdamW(model.parameters())
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, capture_steps=(3, 4), memory=args.memory, count_flops=False,
                    sample_utilization=False, measure_ceiling=False, live=False)
    times, hooks = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        model(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad()
        t1 = time.perf_counter()
        prof.step()
        times.append(time.perf_counter() - t0)
        hooks.append(time.perf_counter() - t1)
    held = prof.results().trials[0].metrics.memory_categories  # type: ignore[union-attr]
    print(json.dumps({"times": times, "peak_category": held.peak_category if held else None, "categorise": sum(categorise), "hooks": hooks,
                      "params": sum(p.numel() for p in model.parameters())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="processes per side")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--model", choices=["encoder", "gpt", "mlp"], default="encoder")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    costs: dict[bool, list[float]] = {True: [], False: []}
    categorise, steps = [], []
    in_hooks: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * args.runs):
        memory = i % 2 == 0
        cmd = [sys.executable, __file__, "--child", "--steps", str(args.steps), "--d", str(args.d), "--layers",
               str(args.layers), "--seq", str(args.seq), "--model", args.model] + (["--memory"] if memory else [])
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        times = out["times"]
        cost = times[4] + times[5] - 2 * statistics.median(times[6:])
        costs[memory].append(cost)
        steps.append(statistics.median(times[6:]))
        in_hooks[memory].append(sum(out["hooks"][3:6]))  # the trace's stop and export, the window's start and end
        if memory:
            categorise.append(out["categorise"])
        print(f"run {i}: memory={memory} window cost {cost:.3f} s, in prof.step() at steps 3-5 {in_hooks[memory][-1]:.3f} s, "
              f"categorise {out['categorise']:.3f} s (median step "
              f"{steps[-1] * 1e3:.1f} ms, peak category {out['peak_category']}, {out['params'] / 1e6:.1f}M parameters)",
              flush=True)
    for memory, values in costs.items():
        print(f"memory={memory}: steps 4-5 beyond two plain steps, mean {statistics.mean(values):.3f} s "
              f"(min {min(values):.3f}, max {max(values):.3f}) over {len(values)} processes")
    for memory, values in in_hooks.items():
        print(f"memory={memory}: inside prof.step() at steps 3-5, mean {statistics.mean(values):.3f} s "
              f"(min {min(values):.3f}, max {max(values):.3f})")
    print(f"categorisation: mean {statistics.mean(categorise):.3f} s (min {min(categorise):.3f}, max {max(categorise):.3f}); "
          f"median plain step {statistics.median(steps) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

"""A user's training loop, run as its own process by benchmarks/hook_overhead.py; prints one JSON line.

    python benchmarks/overhead_loop.py --loop compute --mode plain      # perfscope is never imported
    python benchmarks/overhead_loop.py --loop compute --mode hooks      # perfscope.Profiler at its defaults

The loop times itself, as its author would: the host clock around steps [--skip, --skip + --steps), which
spans the profiler's warm-up, window start and FLOP-counting step being over (they are one-time costs,
reported apart by the profiler itself). Loops:
- compute: a 3-layer MLP, batch 64, one intra-op thread (about 4-5 ms a step on a server core);
- data: the same model fed by a DataLoader with 2 workers whose samples cost CPU time to build.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


class Synthetic(torch.utils.data.Dataset):
    """Samples that cost real CPU work to produce (a small FFT per sample), like decoding or augmentation."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(512, generator=g)
        for _ in range(4):
            x = torch.fft.irfft(torch.fft.rfft(x), n=512)
        return x, i % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", choices=("compute", "data"), required=True)
    parser.add_argument("--mode", choices=("plain", "hooks", "hooks-nosampler", "hooks-noflops"), required=True)
    parser.add_argument("--skip", type=int, default=60)
    parser.add_argument("--steps", type=int, default=900)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = 512
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total = args.skip + args.steps
    if args.loop == "compute":
        fixed = [(torch.randn(64, width), torch.randint(0, 10, (64,))) for _ in range(16)]
        batches = (fixed[i % 16] for i in range(total))
    else:
        loader = torch.utils.data.DataLoader(Synthetic(), batch_size=64, num_workers=2, persistent_workers=True)
        batches = (b for _, b in zip(range(total), loader))

    prof = None
    if args.mode != "plain":
        from perfscope.hooks import Profiler

        prof = Profiler(model, opt, sample_utilization=args.mode == "hooks", count_flops=args.mode != "hooks-noflops")
        batches = prof.wrap(batches)

    start = cpu0 = thread0 = sys0 = 0.0
    for i, (x, y) in enumerate(batches):
        if i == args.skip:
            start, cpu0, thread0, sys0 = time.perf_counter(), time.process_time(), time.thread_time(), os.times().system
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if prof is not None:
            prof.step()
    end, cpu1, thread1, sys1 = time.perf_counter(), time.process_time(), time.thread_time(), os.times().system
    print(json.dumps({"loop": args.loop, "mode": args.mode, "steps": args.steps, "wall_s": end - start,
                      "steps_per_s": args.steps / (end - start), "process_cpu_s": cpu1 - cpu0, "main_thread_cpu_s": thread1 - thread0,
                      "kernel_cpu_s": sys1 - sys0}))


if __name__ == "__main__":
    main()

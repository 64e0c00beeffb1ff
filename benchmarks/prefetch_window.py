"""The timed window's throughput on a data-bound loader against the one-worker bound (trial/loop.py, drain_prefetch).

One DataLoader worker makes a batch of 2 in at least 2 × 20 ms; the first step has a one-time cost of 0.5 s,
so the worker fills its prefetch queue (4 batches) during the warm-up. A window that opened on that full queue
read ~2× the bound; after the drain the measured samples/s should be at most ~1.05 × the bound. It prints, per
run, samples/s, the bound, the ratio, and what the drain recorded (drained, or the loader kept up).

Kept here, not in the suite: samples/s and whether `next()` was seen to block are wall-time facts that a loaded
machine moves (a worker starting late, a ready batch costing tens of ms of scheduling). The suite keeps what
load cannot move: which batches (made during the warm-up or after) the window consumed
(tests/test_prefetch_window.py), and the drain's decision on a simulated clock.

    python benchmarks/prefetch_window.py --runs 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfscope.results.config import TrialConfig  # noqa: E402
from perfscope.trial.loop import run_trial  # noqa: E402
from perfscope.workload import Workload  # noqa: E402

SAMPLE_S = 0.02
BATCH, STEPS = 2, 8
WITHIN = 1.05


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SAMPLE_S)  # the workload's own data cost (a decode, a read)
        return torch.randn(4), torch.tensor(i % 2)


class SlowFirstStep(nn.Module):
    """A first step with a one-time cost (compilation, autotuning): the worker fills its queue meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.first = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            self.first = False
            time.sleep(0.5)
        return self.linear(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    workload = Workload(model=SlowFirstStep, dataset=SlowDataset,
                        loss=lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]), batch_size=BATCH)
    config = TrialConfig(micro_batch_size=BATCH, steps=STEPS, warmup_steps=1, num_workers=1, prefetch_factor=4,
                         sample_utilization=False, count_flops=False)
    # One worker delivers at most 1 batch per 2·SAMPLE_S; over the window it made at least STEPS - 1 of the STEPS
    # batches (the first may have been under way).
    bound = BATCH * STEPS / ((STEPS - 1) * BATCH * SAMPLE_S)
    within = 0
    for run in range(args.runs):
        metrics = run_trial(workload, config).metrics
        rate = metrics.samples_per_s or 0.0
        drained = "drained" if "used up and drained" in (metrics.calibration or "") else "kept up"
        ok = rate <= WITHIN * bound
        within += ok
        print(f"run {run + 1}: {rate:7.1f} samples/s, bound {bound:.1f}, ratio {rate / bound:.2f} "
              f"({'within' if ok else 'OVER'} {WITHIN}×), drain: {drained}")
    print(f"{within}/{args.runs} runs within {WITHIN}× the one-worker bound")


if __name__ == "__main__":
    main()

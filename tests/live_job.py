"""`python live_job.py WORKDIR [--live DIR] [--slow-from K] [--wait S] [--compute S] [--watch]`: a training loop that runs until WORKDIR/stop
appears, with perfscope.Profiler as a user writes it, for `perfscope capture` and the watch to act on.

Run by tests/test_live.py. Its loader injects a data wait: every batch sleeps DATA_WAIT_S (from step K on with
--slow-from, SLOW_WAIT_S instead). After each step it writes its step count to WORKDIR/steps (atomically), so the
test knows where the loop was when it asked; at the stop file it saves its results into WORKDIR/out. With WORLD_SIZE > 1 (and RANK, MASTER_ADDR, MASTER_PORT)
the ranks form a gloo group: each stops where any rank saw its stop file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfscope.hooks.profiler import Profiler

QUIET = {"measure_ceiling": False, "sample_utilization": False, "peak_tflops": 1.0}
DATA_WAIT_S = 0.02
"""Against a step of well under a millisecond of compute: the wait is most of every step."""
SLOW_WAIT_S = 0.2


def stopping(work: Path) -> bool:
    """The stop file; in a job of several ranks, any rank's (all stop at the same step, none left in a collective)."""
    stop = torch.tensor([float((work / "stop").exists())])
    if dist.is_initialized():
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    return bool(stop.item())


def batches(work: Path, slow_from: int | None, wait_s: float):
    g = torch.Generator().manual_seed(0)
    i = 0
    while not stopping(work):
        time.sleep(SLOW_WAIT_S if slow_from is not None and i >= slow_from else wait_s)
        yield torch.randn(8, 32, generator=g), torch.randint(0, 16, (8,), generator=g)
        i += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--live", default=None)
    parser.add_argument("--slow-from", type=int, default=None)
    parser.add_argument("--wait", type=float, default=DATA_WAIT_S)
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--compute", type=float, default=0.0, help="seconds each step sleeps besides its compute")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")  # the ranks share a stop file (and their traces say which rank they are)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    extra = {"watch": {"out": str(args.work / "watch"), "noise_floor": 0.3}} if args.watch else {}
    prof = Profiler(model, opt, device="cpu", warmup_steps=2, name="live-job", live=args.live or True, **extra, **QUIET)
    steps = args.work / "steps"
    for x, y in prof.wrap(batches(args.work, args.slow_from, args.wait)):
        F.cross_entropy(model(x), y).backward()
        time.sleep(args.compute)
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
        steps.with_suffix(".tmp").write_text(str(prof.steps_completed))
        os.replace(steps.with_suffix(".tmp"), steps)
    prof.save(args.work / "out")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

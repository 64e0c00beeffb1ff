"""A tiny data-parallel workload whose rank PERFSCOPE_TEST_RANK (default 1) misbehaves as PERFSCOPE_TEST_RANK_MODE says.

Modes: crash (raises), segfault, hang (sleeps forever), straggle (sleeps PERFSCOPE_TEST_STRAGGLE_S more per micro-batch:
a rank slower than its peers, deterministically, whatever the machine's load). The misbehaviour starts at the
rank's 3rd loss call, after the first warm-up step, as a real fault under load would.
"""

import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

_calls = 0


def _misbehave() -> None:
    global _calls
    _calls += 1
    mode = os.environ.get("PERFSCOPE_TEST_RANK_MODE", "")
    if not mode or os.environ.get("RANK", "0") != os.environ.get("PERFSCOPE_TEST_RANK", "1"):
        return
    if mode == "straggle":
        time.sleep(float(os.environ.get("PERFSCOPE_TEST_STRAGGLE_S", "0.02")))
    elif _calls >= 3:
        if mode == "crash":
            raise ValueError("shapes do not match (simulated bug on one rank)")
        if mode == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "hang":
            time.sleep(3600)


def batches(batch_size: int):
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model, batch):
    _misbehave()
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        batches=batches,
        loss=loss,
        batch_size=8,
    )

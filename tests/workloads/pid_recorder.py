"""Writes the pid of every process that builds its model into $PERFSCOPE_TEST_PID_DIR (one file per pid)."""

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


def model() -> nn.Module:
    Path(os.environ["PERFSCOPE_TEST_PID_DIR"], f"{os.getpid()}.pid").touch()
    return nn.Linear(8, 2)


def batches(n: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(n, 8, generator=g), torch.randint(0, 2, (n,), generator=g)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=model, batches=batches, loss=lambda m, b: F.cross_entropy(m(b[0]), b[1]), batch_size=4)

"""A data-bound loop whose step times are bimodal: every fourth batch takes 120 ms to load, the others nothing.

The median step is a fast one; the throughput is set by the slow ones. A profiler that divides the batch
by the median step overstates this loop's throughput several times.
"""

import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

BATCH = 8
SLOW_EVERY = 4 * BATCH  # one slow sample per four batches
SLOW_S = 0.12


class Stalling(torch.utils.data.Dataset):
    def __init__(self, n: int = 4096) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if i % SLOW_EVERY == 0:
            time.sleep(SLOW_S)
        return self.x[i], self.y[i]


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def loss(m, batch):
    x, y = batch
    return F.cross_entropy(m(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=model, dataset=Stalling, loss=loss, batch_size=BATCH)

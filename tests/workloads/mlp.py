"""A tiny MLP on synthetic data: the healthy workload the other test workloads break."""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=make_model, batches=batches, loss=loss, batch_size=8)

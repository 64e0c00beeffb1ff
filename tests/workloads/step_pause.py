"""A tiny MLP whose every micro-batch pays a fixed 15 ms pause on the host (a per-step overhead: a sleep, so it
costs no CPU and no neighbour's load can move it). Micro-batches of 4 with 4 accumulation steps: a micro-batch of
16 with one step keeps the global batch and pays the pause once instead of 4 times — a large, certain gain that
the sweep's grad_accum knob finds on any machine, on a lane of one core as on a whole machine."""

import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

PAUSE_S = 0.015


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model, batch):
    time.sleep(PAUSE_S)
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=make_model, batches=batches, loss=loss, batch_size=4, grad_accum_steps=4)

"""Communication-heavy data parallelism: large parameters, little compute, and accumulation that syncs every micro-batch.

A 2048×2048 linear layer (16 MiB of fp32 gradients) on a batch of 2 samples: each backward is cheap, each gradient
all-reduce is not, and with 4 micro-batches per step the user's loop (no `no_sync`) all-reduces 4 times per step.
`no_sync` accumulation keeps the global batch and all-reduces once.
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

D = 2048


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, D, generator=g), torch.randn(batch_size, D, generator=g)


def loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Linear(D, D),
        batches=batches,
        loss=loss,
        batch_size=2,
        grad_accum_steps=4,
        optimizer=lambda params: torch.optim.SGD(params, lr=1e-3),
    )

"""An MLP whose hidden size (1365, like a SwiGLU 5461) is not a multiple of 8: the alignment finding."""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

HIDDEN = 1365


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(512, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 512), nn.Linear(512, 16)),
        batches=lambda n: iter(lambda: (torch.randn(n, 512), torch.randint(0, 16, (n,))), None),
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        batch_size=256,
    )

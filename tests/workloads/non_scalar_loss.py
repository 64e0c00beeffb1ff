import torch
from torch import nn

import perfscope


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Linear(4, 3),
        batches=lambda bs: iter(lambda: torch.randn(bs, 4), None),
        loss=lambda model, batch: model(batch),  # forgot the reduction: shape (batch, 3)
        batch_size=4,
    )

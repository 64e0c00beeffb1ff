"""48 layers of 32-wide linears on a batch of 4: every op is tiny, framework overhead sets the step time."""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(*[m for _ in range(48) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 10)),
        batches=lambda n: iter(lambda: (torch.randn(n, 32), torch.randint(0, 10, (n,))), None),
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        batch_size=4,
    )

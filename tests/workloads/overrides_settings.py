"""A loop whose own code sets back what perfscope's trial turned on: TF32 off and gc.unfreeze() in every step,
an environment variable rewritten at import, and a forward that runs its matmuls outside autocast."""

import gc
import os

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

os.environ["PERFSCOPE_TEST_KNOB"] = "set-by-the-workload"


class Fp32Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):  # "numerically sensitive": always fp32
            return self.b(torch.relu(self.a(x.float())))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model, batch):
    torch.backends.cuda.matmul.allow_tf32 = False
    gc.unfreeze()
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=Fp32Net, batches=batches, loss=loss, batch_size=8)

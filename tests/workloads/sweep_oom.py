"""A small residual MLP that "runs out of memory" above micro-batch 16: the micro-batch search must survive it.

The OOM is simulated (torch.OutOfMemoryError raised from the loss), so the test is the same on any machine;
the trial process classifies it as "oom" exactly as it would a real CUDA allocation failure. Each micro-batch also
costs a fixed 20 ms (as a per-step data or launch overhead would), so doubling the micro-batch doubles the
throughput and the search reaches the OOM on any machine: on the bare MLP, 8 -> 16 gained less than the search's 3%
plateau under noise, and with 4 ms a heavily loaded machine (load average 6 on 2 cores) still made 16 look no
faster than 8 once; a sleep is not slowed by load, the MLP's compute is.
"""

import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

FITS_UP_TO = 16
PER_MICRO_BATCH_S = 0.02


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(64) for _ in range(3))  # repeated blocks: checkpointing applies
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 64, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    if x.shape[0] > FITS_UP_TO:
        raise torch.OutOfMemoryError(f"simulated: micro-batch {x.shape[0]} does not fit (limit {FITS_UP_TO})")
    time.sleep(PER_MICRO_BATCH_S)
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=Net, batches=batches, loss=loss, batch_size=8, grad_accum_steps=4)

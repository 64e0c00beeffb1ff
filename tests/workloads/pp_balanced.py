"""Equal pipeline stages, compute-dominated: a stack of identical MLP blocks on float features (no embedding, no
head), so every stage does the same matmuls and sends 32 × 256 floats (32 KiB) per micro-batch between stages."""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

WIDTH, LAYERS = 256, 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, WIDTH, generator=g), torch.randn(batch_size, WIDTH, generator=g)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=Stack, batches=batches, batch_size=32,
                              loss=lambda model, batch: F.mse_loss(model(batch[0]), batch[1]),
                              optimizer=lambda params: torch.optim.SGD(params, lr=1e-3))

"""A tiny MLP fed by a map-style Dataset: the DataLoader knobs (workers, persistent, prefetch) apply."""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


class Points(torch.utils.data.Dataset):
    def __init__(self, n: int = 512) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 32, generator=g), torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        dataset=Points, loss=loss, batch_size=16,
    )

"""A small CIFAR-shaped conv net on synthetic images: the workload for channels_last and cuDNN knobs.

    perfscope analyze examples/small_convnet.py
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class SmallConvNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 32), conv_bn(32, 64), nn.MaxPool2d(2),
            conv_bn(64, 128), conv_bn(128, 128), nn.MaxPool2d(2),
            conv_bn(128, 256), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def batches(batch_size: int):
    g = torch.Generator().manual_seed(0)
    while True:
        yield torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=SmallConvNet,
        batches=batches,
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        batch_size=32,
    )

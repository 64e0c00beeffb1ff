"""A data-bound workload: every sample is decoded and augmented on the CPU in Dataset.__getitem__, and
the loop runs with num_workers=0 — the data-loader finding should rank first.

    perfscope analyze examples/cpu_heavy_dataset.py
"""

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


class AugmentedImages(torch.utils.data.Dataset):
    """Simulates JPEG decode + augmentation: real per-sample CPU work (FFT filtering), deterministic."""

    def __init__(self, size: int = 4096, work: int = 6) -> None:
        self.size, self.work = size, work

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 128, 128, generator=g)
        for _ in range(self.work):  # "decode and augment": FFT low-pass filtering, real CPU work
            img = torch.fft.irfft2(torch.fft.rfft2(img) * 0.99, s=img.shape[-2:])
        img = F.interpolate(img[None], size=(64, 64), mode="bilinear", align_corners=False)[0]
        return img, i % 10


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)))


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=Net,
        dataset=AugmentedImages,
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        batch_size=32,
        num_workers=0,
    )

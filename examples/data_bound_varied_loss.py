"""A data-bound loop whose loss differs from batch to batch: samples cost CPU work and a storage read each,
the labels come from the index (a dataset stored sorted by class, four classes), plain SGD, num_workers=0.

    perfscope analyze examples/data_bound_varied_loss.py

Why it is worth running: perfscope compares every faster configuration's losses with the baseline's (the numerics
guard). Here consecutive batches hold different classes, so the loss of one batch says little about the next:
a comparison of two runs at different batches fails at once, where a dataset whose loss barely moves between
batches would hide it. The report's knob table says which global steps (and samples) the guard compared.
"""

import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

CLASSES = 4
RUN = 24
"""Consecutive samples of one class: the dataset is stored sorted by class in runs, so batches differ."""
READ_S = 0.004
"""The storage read of one sample (a latency the workers overlap, whatever the cores)."""


FEATURES = 64


def decode(i: int, rounds: int) -> list[float]:
    """A stand-in for decoding a record: pure-Python work (a few tenths of a millisecond), deterministic in the index."""
    state, out = i * 2654435761 % 2**32 or 1, []
    for _ in range(FEATURES):
        for _ in range(rounds):  # xorshift: the CPU work
            state ^= (state << 13) & 0xFFFFFFFF
            state ^= state >> 17
            state ^= (state << 5) & 0xFFFFFFFF
        out.append(state / 2**32 - 0.5)
    return out


class SortedShards(torch.utils.data.Dataset):
    """Per sample: a read (latency), then CPU work in Python (decoding); deterministic."""

    def __init__(self, size: int = 1024, rounds: int = 8) -> None:
        self.size, self.rounds = size, rounds

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int):
        label = (i // RUN) % CLASSES
        time.sleep(READ_S)
        x = torch.tensor(decode(i, self.rounds)) + 0.5 * label  # what the class looks like
        return x, label


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, CLASSES)),
        dataset=SortedShards,
        loss=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=16,
        num_workers=0,
    )

"""A data-bound loop: each sample costs ~3 ms in a Python "decode" (sleep + work), the model is tiny. Every process
that builds the Dataset writes its pid into $PERFSCOPE_TEST_PID_DIR when that is set."""

import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import perfscope


def decode(i: int) -> torch.Tensor:
    time.sleep(0.003)  # the "I/O" of a sample
    return torch.full((16,), float(i % 7))


class SlowSamples(torch.utils.data.Dataset):
    def __init__(self) -> None:
        if os.environ.get("PERFSCOPE_TEST_PID_DIR"):
            Path(os.environ["PERFSCOPE_TEST_PID_DIR"], f"{os.getpid()}.pid").touch()

    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int):
        return decode(i), i % 2


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=lambda: nn.Linear(16, 2), dataset=SlowSamples,
                              loss=lambda m, b: F.cross_entropy(m(b[0]), b[1]), batch_size=8)

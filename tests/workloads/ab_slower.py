"""tests/workloads/mlp.py with extra work in every step (a candidate revision made slower): for `perfscope ab`."""

import torch

import perfscope
from tests.workloads.mlp import batches, make_model
from tests.workloads.mlp import loss as _loss

EXTRA = torch.randn(160, 160)


def loss(model, batch):
    for _ in range(8):  # work the baseline revision does not do
        torch.mm(EXTRA, EXTRA)
    return _loss(model, batch)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=make_model, batches=batches, loss=loss, batch_size=8)

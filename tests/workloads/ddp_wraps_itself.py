"""A workload whose model() wraps itself in DDP, as a user's own torchrun script does (Workload(wraps_model=True))."""

import torch.distributed as dist
import torch.nn.functional as F
from ddp_ranks import batches
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import perfscope


def model() -> nn.Module:
    assert dist.is_initialized(), "perfscope initializes the process group before model()"
    return DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)))


def loss(m, batch):
    x, y = batch
    return F.cross_entropy(m(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=model, batches=batches, loss=loss, batch_size=8, wraps_model=True)

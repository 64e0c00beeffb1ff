"""The healthy MLP with a per-step `loss.item()` (logging, as users write it): one host sync per step."""

import torch.nn.functional as F

import perfscope


def _loss(model, batch):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    _ = loss.item()  # the sync under test
    return loss


def workload() -> perfscope.Workload:
    import torch
    from torch import nn

    def batches(batch_size: int):
        g = torch.Generator().manual_seed(0)
        while True:
            yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)

    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        batches=batches, loss=_loss, batch_size=8,
    )

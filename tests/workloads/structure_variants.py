"""A small MLP whose structure a CI gate must tell apart: PERFSCOPE_TEST_VARIANT picks one change.

    base          the healthy step
    item          + a per-step `loss.item()` (logging): one host sync per step
    extra_matmul  + one more Linear in the forward: more FLOPs, more ops
    fp32_head     the head computed on `.float()` activations with autocast off (run under bf16 autocast):
                  part of the matmul FLOPs leave bf16 (a bare `.float()` before a Linear is re-cast by autocast)
    graph_break   + `torch._dynamo.graph_break()` in the forward (run under torch.compile): two graphs

One file for every variant, as in CI: the benchmark workload stays fixed (same sha256), the model code changes.
"""

import os

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

VARIANTS = ("base", "item", "extra_matmul", "fp32_head", "graph_break")


class Net(nn.Module):
    def __init__(self, variant: str) -> None:
        super().__init__()
        self.variant = variant
        self.fc1, self.fc2, self.head = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)
        self.extra = nn.Linear(64, 64) if variant == "extra_matmul" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        if self.variant == "graph_break":
            torch._dynamo.graph_break()
        h = F.relu(self.fc2(h))
        if self.extra is not None:
            h = F.relu(self.extra(h))
        if self.variant == "fp32_head":
            with torch.autocast(x.device.type, enabled=False):
                return self.head(h.float())
        return self.head(h)


def workload() -> perfscope.Workload:
    variant = os.environ.get("PERFSCOPE_TEST_VARIANT", "base")
    if variant not in VARIANTS:
        raise ValueError(f"PERFSCOPE_TEST_VARIANT={variant!r}: one of {VARIANTS}")

    def batches(batch_size: int):
        g = torch.Generator().manual_seed(0)
        while True:
            yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)

    def loss(model, batch):
        x, y = batch
        out = F.cross_entropy(model(x), y)
        if variant == "item":
            print_every = out.item()  # noqa: F841 - the per-step sync under test (logging, as users write it)
        return out

    return perfscope.Workload(model=lambda: Net(variant), batches=batches, loss=loss, batch_size=8)

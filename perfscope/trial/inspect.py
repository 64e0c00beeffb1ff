"""What the knobs need to know about the user's model, read in the probe process.

    facts = inspect_model(workload)      # ModelFacts(parameter_count=..., has_conv2d=..., ...)

The model is built on the meta device when it can be (no memory, no init cost: a 7B model inspects in
milliseconds), for real otherwise — and only ever in a trial-like process, never in the analyze parent.
"""

from __future__ import annotations

import torch
from torch import nn

from perfscope.measure.tf32 import matmul_tf32_enabled
from perfscope.results.model import ModelFacts
from perfscope.trial.checkpointing import find_repeated_blocks
from perfscope.workload import Workload


def inspect_model(workload: Workload) -> ModelFacts:
    try:
        with torch.device("meta"):
            model = workload.model()
    except Exception:  # noqa: BLE001 - some models cannot be built on meta; build them for real
        model = workload.model()
    blocks = workload.checkpoint_blocks(model) if workload.checkpoint_blocks else find_repeated_blocks(model)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        optimizer_class = type(workload.optimizer([nn.Parameter(torch.zeros(1))])).__name__
    except Exception:  # noqa: BLE001
        optimizer_class = "unknown"
    return ModelFacts(
        parameter_count=sum(p.numel() for p in params),
        has_conv2d=any(isinstance(m, nn.Conv2d) for m in model.modules()),
        repeated_blocks=len(blocks),
        optimizer_class=optimizer_class,
        matmul_tf32=matmul_tf32_enabled(),
    )

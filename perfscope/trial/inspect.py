"""What the knobs need to know about the user's model, read in the probe process. Design notes: docs/measurement.md."""

from __future__ import annotations

import torch
from torch import nn

from perfscope.knobs.apply.checkpointing import find_repeated_blocks
from perfscope.results.layout import ModelLayout
from perfscope.results.model import ModelFacts
from perfscope.tf32_api import matmul_tf32_enabled
from perfscope.trial.tensor_parallel import derive_plan
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
        layout=model_layout(model, workload, blocks),
    )


TP_DEGREES = (2, 4, 8)


def model_layout(model: nn.Module, workload: Workload, blocks: list[nn.Module]) -> ModelLayout | None:
    """How the model splits: blocks for the pipeline, the TP plan's parameters and where it does not apply."""
    try:
        layout = ModelLayout(blocks=len(blocks), block_parameter_count=sum(p.numel() for b in blocks for p in b.parameters()))
        modules = dict(model.named_modules())
        for tp in TP_DEGREES:
            plan = derive_plan(model, tp, workload)
            if plan.reason is not None:
                layout.tp_inapplicable[str(tp)] = plan.reason
            elif not layout.tp_parameter_count:
                layout.tp_parameter_count = sum(p.numel() for name in plan.styles if name in modules
                                                for p in modules[name].parameters())
                layout.tp_plan_source = plan.source
        return layout
    except Exception:  # noqa: BLE001 - a layout the probe cannot read: the layout knobs say so, nothing else fails
        return None

"""The optimizer a trial steps: the user's own (optionally foreach/fused), or a memory-lean replacement.

Design notes: docs/measurement.md."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch
from torch import nn

from perfscope.results.config import TrialConfig
from perfscope.workload import Workload

EIGHT_BIT_CLASSES = {"Adam": "Adam8bit", "AdamW": "AdamW8bit"}
"""The 8-bit counterpart of each optimizer that has one (same algorithm, quantized moments)."""
EIGHT_BIT_MODULES = {
    "8bit-torchao": ("torchao.optim", "torchao.prototype.low_bit_optim"),  # public since torchao 0.10, prototype before
    "8bit-bnb": ("bitsandbytes.optim",),
}


def build_optimizer(workload: Workload, model: nn.Module, config: TrialConfig) -> torch.optim.Optimizer:
    """The optimizer ``config`` asks for, on the model's trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    user = workload.optimizer(params)
    if config.optimizer == "adafactor":
        return _adafactor(user, config.optimizer_impl)
    if config.optimizer in EIGHT_BIT_MODULES:
        return _eight_bit(user, config.optimizer, config.optimizer_impl)
    if config.optimizer_impl == "default":
        return user
    # Rebuild from the user's settings, keeping only what the constructor accepts (defaults can hold
    # derived keys, e.g. AdamW's decoupled_weight_decay) and dropping the implementation flags.
    accepted = set(inspect.signature(type(user).__init__).parameters) - {"self", "params", "foreach", "fused"}
    groups = [{k: v for k, v in g.items() if k == "params" or k in accepted} for g in user.param_groups]
    defaults = {k: v for k, v in user.defaults.items() if k in accepted}
    return type(user)(groups, **defaults, **{config.optimizer_impl: True})


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    cls = type(optimizer)
    return f"{cls.__module__}.{cls.__qualname__}"


def _groups(user: torch.optim.Optimizer, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The user's parameter groups with only ``keys`` carried over (where the group has them)."""
    return [{"params": g["params"], **{k: g[k] for k in keys if k in g}} for g in user.param_groups]


def _adafactor(user: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    adafactor = getattr(torch.optim, "Adafactor", None)
    if adafactor is None:
        raise RuntimeError(f"torch.optim.Adafactor needs torch >= 2.5 (this torch: {torch.__version__})")
    if impl == "fused":
        raise ValueError("torch.optim.Adafactor has no fused implementation")
    return adafactor(_groups(user, ("lr", "weight_decay")), **({"foreach": True} if impl == "foreach" else {}))


def _eight_bit(user: torch.optim.Optimizer, choice: str, impl: str) -> torch.optim.Optimizer:
    name = EIGHT_BIT_CLASSES.get(type(user).__name__)
    if name is None:
        raise ValueError(f"no 8-bit counterpart of {type(user).__name__} (8-bit state is for {', '.join(EIGHT_BIT_CLASSES)})")
    if impl != "default":
        raise ValueError(f"8-bit {name} has no {impl} implementation")
    cls = _import_class(EIGHT_BIT_MODULES[choice], name)
    return cls(_groups(user, ("lr", "betas", "eps", "weight_decay", "amsgrad")))


def _import_class(modules: tuple[str, ...], name: str) -> Any:
    errors = []
    for module_name in modules:
        try:
            return getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module_name}.{name}: {type(exc).__name__}: {exc}")
    raise ImportError("; ".join(errors))

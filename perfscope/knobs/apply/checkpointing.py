"""Activation checkpointing of a model's repeated blocks (non-reentrant `torch.utils.checkpoint`: it works with
autocast, kwargs and inputs that do not require grad), switchable so that FLOPs can be counted honestly:

    blocks = apply_checkpointing(model)   # auto: the largest nn.ModuleList of same-type blocks
    with checkpointing_off(blocks): ...   # the model's own FLOPs (MFU); with it on, what the hardware ran (HFU)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint


class CheckpointedBlock(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.enabled = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.enabled and self.training:
            return checkpoint(self.block, *args, use_reentrant=False, **kwargs)
        return self.block(*args, **kwargs)


def find_repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The children of the nn.ModuleList (or Sequential) of ≥2 same-type blocks holding the most parameters."""
    best: list[nn.Module] = []
    best_params = 0
    for module in model.modules():
        if not isinstance(module, nn.ModuleList | nn.Sequential):
            continue
        children = list(module.children())
        if len(children) < 2 or len({type(c) for c in children}) != 1:
            continue
        if not any(True for _ in children[0].parameters()):
            continue
        params = sum(p.numel() for c in children for p in c.parameters())
        if params > best_params:
            best, best_params = children, params
    return best


def unwrapped(block: nn.Module) -> nn.Module:
    """The block inside a checkpoint wrapper (itself when not wrapped)."""
    return block.block if isinstance(block, CheckpointedBlock) else block


def shard_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2 shards one by one (DDP/FSDP2 and the 2-D TP layout alike): the repeated blocks, unwrapped
    from their checkpoint wrappers."""
    return [unwrapped(b) for b in find_repeated_blocks(model)]


def apply_checkpointing(
    model: nn.Module, select: Callable[[nn.Module], list[nn.Module]] | None = None
) -> list[CheckpointedBlock]:
    """Wrap the selected (or auto-detected) blocks in place; returns the wrappers (empty: nothing to wrap)."""
    targets = select(model) if select is not None else find_repeated_blocks(model)
    target_ids = {id(t) for t in targets}
    wrappers: list[CheckpointedBlock] = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in target_ids:
                wrapper = CheckpointedBlock(child)
                setattr(parent, name, wrapper)
                wrappers.append(wrapper)
    return wrappers


@contextmanager
def checkpointing_off(wrappers: list[CheckpointedBlock]) -> Iterator[None]:
    """Run the blocks plainly: the model FLOPs of a step. Hardware FLOPs are counted with checkpointing on, as the
    step runs: non-reentrant recompute stops early (once the tensors backward needs exist), so "the whole forward
    of every block again" would overstate it (+29% instead of the +20% that ran, on examples/tiny_transformer.py)."""
    previous = [w.enabled for w in wrappers]
    for w in wrappers:
        w.enabled = False
    try:
        yield
    finally:
        for w, enabled in zip(wrappers, previous, strict=True):
            w.enabled = enabled

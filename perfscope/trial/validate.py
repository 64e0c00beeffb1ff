"""Validate a workload on its trial device before any trial starts: one small training step.

Design notes: docs/measurement.md."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfscope.errors import WorkloadError
from perfscope.knobs.apply.checkpointing import find_repeated_blocks
from perfscope.measure.clock import synchronize
from perfscope.results.layout import ModelLayout
from perfscope.results.model import ModelFacts
from perfscope.tf32_api import matmul_tf32
from perfscope.trial.data import to_device
from perfscope.trial.tensor_parallel import derive_plan, model_on_meta
from perfscope.workload import Workload, describe_user_exception, user_code


def _first_samples(workload: Workload, path: Path, count: int) -> Any:
    """Build one batch of ``count`` samples on the CPU, naming the failing dataset index if one raises."""
    if workload.batches is not None:
        try:
            iterator: Iterator[Any] = iter(workload.batches(count))
            return next(iterator)
        except StopIteration:
            raise WorkloadError(f"{path}: batches({count}) yielded no batch") from None
        except Exception as exc:  # noqa: BLE001
            raise WorkloadError(describe_user_exception(exc, path, f"batches({count})")) from exc
    with user_code(path, "dataset()"):
        dataset = workload.dataset()  # type: ignore[misc]
    collate = workload.collate_fn or torch.utils.data.default_collate
    samples: list[Any] = []
    if isinstance(dataset, torch.utils.data.IterableDataset):
        try:
            for i, sample in zip(range(count), dataset):
                samples.append(sample)
        except Exception as exc:  # noqa: BLE001
            raise WorkloadError(describe_user_exception(exc, path, f"iterating the dataset (sample {len(samples)})")) from exc
    else:
        if not hasattr(dataset, "__getitem__"):
            raise WorkloadError(f"{path}: dataset() returned {type(dataset).__name__}, which is not a torch Dataset")
        try:
            length = len(dataset)
        except TypeError:
            length = None
        if length is not None and length < count:
            raise WorkloadError(f"{path}: the dataset has {length} samples, fewer than batch_size={count}")
        for i in range(count):
            with user_code(path, f"dataset[{i}]"):
                samples.append(dataset[i])
    if not samples:
        raise WorkloadError(f"{path}: the dataset yielded no samples")
    with user_code(path, "collating a batch"):
        return collate(samples)


def validate_workload(workload: Workload, path: str | Path, *, dry_run_batch: int = 2, device: str = "cpu") -> float:
    """One training step with a small batch on ``device``: catches contract errors before any trial starts.
    Returns its wall time scaled to the micro-batch (the first duration estimate); never calls the workload twice."""
    path = Path(path).resolve()
    if workload.dataset is not None:
        _first_samples(workload, path, workload.batch_size)
    batch = to_device(_first_samples(workload, path, min(dry_run_batch, workload.batch_size)), device, non_blocking=False)
    torch.manual_seed(0)
    with user_code(path, "model()"):
        model = workload.model()
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"{path}: model() returned {type(model).__name__}, expected a torch.nn.Module")
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise WorkloadError(f"{path}: the model has no trainable parameters")
    with user_code(path, "optimizer(params)"):
        optimizer = workload.optimizer(params)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WorkloadError(f"{path}: optimizer(params) returned {type(optimizer).__name__}, expected a torch.optim.Optimizer")
    synchronize(device)
    start = time.perf_counter()
    with user_code(path, "loss(model, batch)"):
        loss = workload.loss(model, batch)
    if not isinstance(loss, torch.Tensor):
        raise WorkloadError(f"{path}: loss(model, batch) returned {type(loss).__name__}, expected a scalar tensor")
    if loss.numel() != 1:
        raise WorkloadError(f"{path}: loss(model, batch) returned a tensor of shape {tuple(loss.shape)}, expected a scalar")
    if not loss.requires_grad:
        raise WorkloadError(f"{path}: the loss does not require grad: it is not connected to the model's parameters")
    with user_code(path, "backward/optimizer step"):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)  # a CUDA step is asynchronous
    return (time.perf_counter() - start) * workload.batch_size / min(dry_run_batch, workload.batch_size)


def inspect_model(workload: Workload) -> ModelFacts:
    model = model_on_meta(workload)
    blocks = workload.checkpoint_blocks(model) if workload.checkpoint_blocks else find_repeated_blocks(model)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        optimizer_class = type(workload.optimizer([nn.Parameter(torch.zeros(1))])).__name__
    except Exception:  # noqa: BLE001
        optimizer_class = "unknown"
    return ModelFacts(parameter_count=sum(p.numel() for p in params), repeated_blocks=len(blocks),
                      has_conv2d=any(isinstance(m, nn.Conv2d) for m in model.modules()), optimizer_class=optimizer_class,
                      matmul_tf32=matmul_tf32().enabled, layout=model_layout(model, workload, blocks))


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

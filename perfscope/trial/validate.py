"""Validate a workload on its trial device before any trial starts: one small training step.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from perfscope.errors import WorkloadError
from perfscope.trial.data import to_device
from perfscope.workload import Workload, describe_user_exception


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
    try:
        dataset = workload.dataset()  # type: ignore[misc]
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "dataset()")) from exc
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
            try:
                samples.append(dataset[i])
            except Exception as exc:  # noqa: BLE001
                raise WorkloadError(describe_user_exception(exc, path, f"dataset[{i}]")) from exc
    if not samples:
        raise WorkloadError(f"{path}: the dataset yielded no samples")
    try:
        return collate(samples)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "collating a batch")) from exc


def validate_workload(workload: Workload, path: str | Path, *, dry_run_batch: int = 2, device: str = "cpu") -> float:
    """One training step with a small batch on ``device``: catches contract errors before any trial starts.
    Returns its wall time scaled to the micro-batch (the first duration estimate); never calls the workload twice."""
    path = Path(path).resolve()
    if workload.dataset is not None:
        _first_samples(workload, path, workload.batch_size)
    batch = to_device(_first_samples(workload, path, min(dry_run_batch, workload.batch_size)), device, non_blocking=False)
    torch.manual_seed(0)
    try:
        model = workload.model()
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "model()")) from exc
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"{path}: model() returned {type(model).__name__}, expected a torch.nn.Module")
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise WorkloadError(f"{path}: the model has no trainable parameters")
    try:
        optimizer = workload.optimizer(params)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "optimizer(params)")) from exc
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WorkloadError(f"{path}: optimizer(params) returned {type(optimizer).__name__}, expected a torch.optim.Optimizer")
    start = _now(device)
    try:
        loss = workload.loss(model, batch)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "loss(model, batch)")) from exc
    if not isinstance(loss, torch.Tensor):
        raise WorkloadError(f"{path}: loss(model, batch) returned {type(loss).__name__}, expected a scalar tensor")
    if loss.numel() != 1:
        raise WorkloadError(f"{path}: loss(model, batch) returned a tensor of shape {tuple(loss.shape)}, expected a scalar")
    if not loss.requires_grad:
        raise WorkloadError(f"{path}: the loss does not require grad: it is not connected to the model's parameters")
    try:
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "backward/optimizer step")) from exc
    return (_now(device) - start) * workload.batch_size / min(dry_run_batch, workload.batch_size)


def _now(device: str) -> float:
    """The wall clock once the device's queued work is done (a CUDA step is asynchronous)."""
    import time

    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()

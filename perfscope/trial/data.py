"""The trial's data pipeline: a DataLoader perfscope controls (or the user's batch generator), endless,
and a device copy that honours pin_memory + non_blocking.

Design notes: docs/measurement.md."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from perfscope.knobs import loader_options
from perfscope.knobs.apply.tensors import map_tensors
from perfscope.measure.dataset_profile import PROFILE_AT_DATA_WAIT, profile_dataset
from perfscope.measure.tokens import leading_dim
from perfscope.results import TrialMetrics
from perfscope.results.config import TrialConfig
from perfscope.results.messages import error, msg
from perfscope.trial.data_parallel import data_rank, shard_sampler
from perfscope.workload import Workload


def endless_batches(workload: Workload, config: TrialConfig) -> Iterator[Any]:
    """Batches forever: restarts the loader when an epoch ends (the restart cost is real, so it is timed).

    In a data-parallel rank each rank reads its own shard: a DistributedSampler over a map-style dataset, every
    world-size-th batch of an iterable one, and a batches() generator seeded by the rank (synthetic data)."""
    rank, size = data_rank(config), config.micro_batch_size
    stride, offset = 1, 0
    if workload.batches is not None:
        if rank is not None:
            torch.manual_seed(config.seed + rank.rank)
        epochs: Iterator[Iterable[Any]] = (workload.batches(size) for _ in itertools.count())  # type: ignore[misc]
        empty = f"batches() yielded no batch of {size} samples"
    else:
        dataset = workload.dataset()  # type: ignore[misc]
        is_iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        sampler = shard_sampler(dataset, rank) if rank is not None else None
        # No shuffle: the same batches in every trial (the numerics guard compares losses); workers, pin_memory and
        # prefetch are the knobs' (perfscope.knobs).
        kwargs: dict[str, Any] = {"batch_size": size, "shuffle": False, "drop_last": not is_iterable, **loader_options(config),
                                  **{k: v for k, v in (("collate_fn", workload.collate_fn), ("sampler", sampler)) if v is not None}}
        loader = torch.utils.data.DataLoader(dataset, **kwargs)
        if rank is not None and sampler is None and is_iterable:
            stride, offset = rank.world_size, rank.rank
        epochs, empty = itertools.repeat(loader), "the DataLoader yielded no full batch (dataset smaller than one batch?)"
    for epoch in epochs:
        produced = False
        for i, batch in enumerate(full_batches(epoch, size)):
            if i % stride == offset:
                produced = True
                yield batch
        if not produced:
            raise RuntimeError(empty)


def full_batches(batches: Iterable[Any], size: int) -> Iterator[Any]:
    """The batches of ``size`` samples (or of unknown size): a short batch at the end of an epoch is dropped
    (a new shape would recompile a compiled model inside the timed window)."""
    for batch in batches:
        n = leading_dim(batch)
        if n is None or n == size:
            yield batch


def to_device(batch: Any, device: str, *, non_blocking: bool) -> Any:
    """Move every tensor in a (nested) batch (the channels_last knob converts its inputs afterwards)."""
    return map_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))


def profile_dataset_cost(workload: Workload, config: TrialConfig, metrics: TrialMetrics) -> None:
    """When the step waited for data, where the Dataset spends its time (perfscope.measure.dataset_profile)."""
    wait = max(metrics.data_wait_share, metrics.host_data_wait_share)
    if workload.dataset is None or wait < PROFILE_AT_DATA_WAIT:
        return
    try:
        metrics.dataset_profile = profile_dataset(workload.dataset(), batch_size=config.micro_batch_size,
                                                  collate_fn=workload.collate_fn)
    except Exception as exc:  # noqa: BLE001 - the profile is a diagnosis, the measurement is already safe
        metrics.unavailable["dataset_profile"] = msg("dataset_profile_failed", error=error(exc))

"""Data parallelism inside a trial rank: the process group, the model's wrapper, gradient sync, data shards.

Design notes: docs/measurement.md."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfscope.knobs.apply.checkpointing import shard_blocks
from perfscope.results.config import TrialConfig
from perfscope.trial.tensor_parallel import apply_tensor_parallel


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int
    node: str
    backend: str


def current_rank() -> RankInfo | None:
    """This process's place in an initialized process group of more than one rank, else None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return RankInfo(dist.get_rank(), int(os.environ.get("LOCAL_RANK", dist.get_rank())), dist.get_world_size(),
                    socket.gethostname(), str(dist.get_backend()))


def init_process_group(device: str, *, timeout_s: float) -> RankInfo:
    """Join the job torchrun started (RANK, WORLD_SIZE, MASTER_ADDR... in the environment)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
    if device == "cuda":
        torch.cuda.set_device(local_rank)  # "cuda" means this rank's GPU from here on
        kwargs["device_id"] = torch.device("cuda", local_rank)
    dist.init_process_group(**kwargs)
    info = current_rank()
    if info is None:
        raise RuntimeError("the process group has a single rank: a distributed trial needs at least two")
    return info


def max_over_ranks(value: int, device: str) -> int:
    """The largest ``value`` any rank has (what every rank agrees on: timed steps, a drained prefetch queue).
    Identity outside a group."""
    if current_rank() is None:
        return value
    box = torch.tensor([int(value)], dtype=torch.int64, device="cuda" if device == "cuda" else "cpu")
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return int(box.item())


def init_single_process_group(device: str) -> None:
    """A process group of one (the probe's dry run of a workload whose model() wraps itself in DDP or FSDP, which
    needs a group to exist); nothing when one exists already."""
    if dist.is_initialized():
        return
    dist.init_process_group("nccl" if device == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)


def wrap_model(model: nn.Module, config: TrialConfig, device: str, *, workload: Any | None = None) -> nn.Module:
    """The module the step runs: ``model`` wrapped as the config asks (it must already be on its device). Under TP
    (every block split first) FSDP2 shards across the replicas on the mesh's "dp" dimension."""
    mesh = apply_tensor_parallel(model, config, workload) if config.tensor_parallel > 1 else None
    if config.data_parallel == "none":
        return model
    device_ids = [torch.cuda.current_device()] if device == "cuda" else None
    if config.data_parallel in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel

        kwargs: dict[str, Any] = {"gradient_as_bucket_view": config.gradient_as_bucket_view,
                                  "static_graph": config.static_graph}
        if config.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = config.bucket_cap_mb
        wrapped = DistributedDataParallel(model, device_ids=device_ids, **kwargs)
        if config.comm_hook is not None:
            _register_comm_hook(wrapped, config.comm_hook)
        return wrapped
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if config.fsdp_mixed_precision is not None:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[config.fsdp_mixed_precision]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)
    on_mesh = {"mesh": mesh["dp"]} if mesh is not None else {}
    for block in shard_blocks(model):
        fully_shard(block, reshard_after_forward=config.reshard_after_forward, mp_policy=policy, **on_mesh)
    fully_shard(model, reshard_after_forward=config.reshard_after_forward, mp_policy=policy, **on_mesh)
    return model


def _register_comm_hook(wrapped: Any, hook: str) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "bf16":
        wrapped.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "fp16":
        wrapped.register_comm_hook(None, default_hooks.fp16_compress_hook)
    else:
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        wrapped.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def shard_optimizer(optimizer: torch.optim.Optimizer, config: TrialConfig) -> torch.optim.Optimizer:
    """ZeRO-1: the user's optimizer class and settings, its state sharded across ranks (ZeroRedundancyOptimizer)."""
    if config.data_parallel != "zero1":
        return optimizer
    from torch.distributed.optim import ZeroRedundancyOptimizer

    params = [p for group in optimizer.param_groups for p in group["params"]]
    accepted = constructor_keys(optimizer)
    return ZeroRedundancyOptimizer(params, optimizer_class=type(optimizer),
                                   **{k: v for k, v in optimizer.defaults.items() if k in accepted})


def constructor_keys(optimizer: torch.optim.Optimizer, drop: frozenset[str] = frozenset()) -> set[str]:
    """The settings the optimizer's constructor takes, less ``drop``: its defaults also hold derived keys (AdamW's
    decoupled_weight_decay) that a rebuilt optimizer must not be given."""
    return set(inspect.signature(type(optimizer).__init__).parameters) - {"self", "params", *drop}


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that holds this rank's state (ZeroRedundancyOptimizer keeps its shard in ``.optim``)."""
    return getattr(optimizer, "optim", optimizer)


@contextmanager
def gradient_sync(wrapped: nn.Module, *, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce / reduce-scatter of the backward passes inside, when not ``enabled``."""
    if enabled:
        yield
        return
    no_sync = getattr(wrapped, "no_sync", None)
    if no_sync is not None:  # DDP
        with no_sync():
            yield
        return
    set_sync = getattr(wrapped, "set_requires_gradient_sync", None)
    if set_sync is not None:  # FSDP2
        set_sync(False)
        try:
            yield
        finally:
            set_sync(True)
        return
    yield


def can_skip_all_communication(config: TrialConfig) -> bool:
    """DDP's only communication is the gradient all-reduce: under no_sync a DDP step (without the optimizer step,
    which ZeRO-1 ends with a broadcast) talks to no peer. FSDP gathers parameters in forward whatever the sync."""
    return config.data_parallel in ("ddp", "zero1")


def data_rank(config: TrialConfig) -> RankInfo | None:
    """Which data shard this rank reads: its data-parallel replica. The ranks of one TP group or pipeline read the
    same samples (a replica's rank index = global rank // (tp × pp)); None when there is one replica."""
    rank = current_rank()
    if rank is None or config.model_parallel == 1:
        return rank
    if config.data_parallel_size == 1:
        return None
    return dataclasses.replace(rank, rank=rank.rank // config.model_parallel, world_size=config.data_parallel_size)


def shard_sampler(dataset: Any, rank: RankInfo) -> Any | None:
    """A DistributedSampler for a map-style dataset (same order every trial: no shuffle); None for an iterable one."""
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return None
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(dataset, num_replicas=rank.world_size, rank=rank.rank, shuffle=False, drop_last=True)

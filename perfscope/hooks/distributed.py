"""The hooks on every rank of the user's own torchrun job: who this rank is, its summary, and rank 0 collecting
them (`exchange`). Design notes: docs/distributed.md."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from perfscope.measure import memory
from perfscope.measure.ranks import rank_metrics as measured_rank
from perfscope.results.distributed import RankMetrics
from perfscope.results.messages import msg
from perfscope.results.serde import from_jsonable, to_jsonable


@dataclass(frozen=True, kw_only=True)
class RankPlace:
    """This process's place in the job, read from torch.distributed and torchrun's environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    """torchrun's LOCAL_WORLD_SIZE (None when the launcher did not set it)."""
    node: str
    backend: str


def find_place() -> RankPlace | None:
    """This rank's place; None outside an initialized process group of more than one rank, or where
    torch.distributed cannot say (a half-torn-down group)."""
    import torch.distributed as dist

    try:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
            return None
        rank, local_world = dist.get_rank(), os.environ.get("LOCAL_WORLD_SIZE", "")
        return RankPlace(
            rank=rank, world_size=dist.get_world_size(), local_rank=int(os.environ.get("LOCAL_RANK", rank)),
            local_world_size=int(local_world) if local_world.isdigit() else None, node=socket.gethostname(),
            backend=str(dist.get_backend()),
        )
    except Exception:  # noqa: BLE001 - one process, then
        return None


def data_parallel_of(model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None) -> str:
    """How the user's loop distributes the model: "ddp", "zero1" (DDP + ZeroRedundancyOptimizer), "fsdp", else
    "none" (a wrapper perfscope does not recognise, or a model given unwrapped)."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return "zero1" if isinstance(optimizer, ZeroRedundancyOptimizer) else "ddp"
    from torch.distributed.fsdp import FullyShardedDataParallel

    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6 (pyproject allows 2.3): FSDP2 is not public there
        return "fsdp" if isinstance(model, FullyShardedDataParallel) else "none"
    return "fsdp" if isinstance(model, FSDPModule | FullyShardedDataParallel) else "none"


def ddp_settings(model: torch.nn.Module | None) -> dict[str, Any]:
    """The DDP constructor settings TrialConfig records, read from the user's DDP module (empty otherwise)."""
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return {}
    settings: dict[str, Any] = {"gradient_as_bucket_view": bool(getattr(model, "gradient_as_bucket_view", False)),
                                "static_graph": bool(getattr(model, "static_graph", False))}
    cap = getattr(model, "bucket_bytes_cap", None)
    if isinstance(cap, int) and cap != 25 * 2**20:  # TrialConfig: None is torch's default, 25 MB
        settings["bucket_cap_mb"] = cap / 2**20
    return settings


def layout(place: RankPlace, reports: list[RankReport]) -> tuple[int, int]:
    """(nnodes, nproc_per_node): from the nodes every rank reported, else torchrun's LOCAL_WORLD_SIZE, else one node."""
    nodes = {r.metrics.node for r in reports if r.metrics is not None}
    if len(reports) == place.world_size and len(nodes) >= 1 and place.world_size % len(nodes) == 0:
        return len(nodes), place.world_size // len(nodes)
    local = place.local_world_size
    if local and place.world_size % local == 0:
        return place.world_size // local, local
    return 1, place.world_size


@dataclass(kw_only=True)
class RankReport:
    """What one rank sends rank 0 at save(): its own measurement, where its trace is, or why it has none."""

    rank: int
    metrics: RankMetrics | None = None
    own_cpu_cores: float | None = None
    """Cores this rank's process (and its DataLoader workers) used in its window: rank 0 takes the job's own
    ranks out of each rank's other_cpu_cores, so that figure is the machine's other work, not the peers."""
    trace: str | None = None
    """The rank's trace file (rank<R>.json.gz), as a path on its own node."""
    error: str | None = None
    """Why the rank has no measurement (its profiler disabled itself after an internal error)."""


def rank_metrics(place: RankPlace, metrics: Any, model: torch.nn.Module | None,
                 optimizer: torch.optim.Optimizer | None, why_none: str = "") -> RankMetrics:
    """This rank's RankMetrics from its own TrialMetrics (None: nothing timed, ``why_none`` says why): the one
    summary of perfscope.measure.ranks, with the memory owners counted here when nothing was timed."""
    owners = None
    if (metrics is None or metrics.memory_breakdown is None) and model is not None and optimizer is not None:
        owners = memory.breakdown(model, optimizer, None, grads_present=False)
    return measured_rank(metrics, rank=place.rank, local_rank=place.local_rank, node=place.node, owners=owners,
                         why_none=msg("exception", error=why_none) if why_none else None)


def without_peers(reports: list[RankReport]) -> None:
    """Each rank's other_cpu_cores less what the job's other ranks on its node used: the peers are other
    processes to psutil, but their load is the job itself, not a neighbour's."""
    for report in reports:
        mine = report.metrics
        if mine is None or mine.other_cpu_cores is None:
            continue
        peers = [r for r in reports if r is not report and r.metrics is not None and r.metrics.node == mine.node]
        if any(p.own_cpu_cores is None for p in peers):
            mine.unavailable["other_cpu_cores"] = msg("includes_peer_ranks")
            continue
        mine.other_cpu_cores = max(mine.other_cpu_cores - sum(p.own_cpu_cores or 0.0 for p in peers), 0.0)


def exchange(place: RankPlace, report: RankReport, *, key: str, timeout_s: float,
             device: torch.device) -> list[RankReport | None] | None:
    """Rank 0: every rank's report in rank order (None where a rank did not report within ``timeout_s`` of rank 0
    asking); other ranks: send and return None at once. Every rank must call it with the same ``key``."""
    payload = json.dumps(to_jsonable(report))
    store = _default_store()
    if store is None:
        return _gather(place, payload, device)
    if place.rank != 0:
        store.set(f"{key}/{place.rank}", payload)
        return None
    reports: list[RankReport | None] = [report]
    deadline = time.monotonic() + timeout_s
    for rank in range(1, place.world_size):
        name = f"{key}/{rank}"
        try:
            store.wait([name], timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
        except Exception:  # noqa: BLE001 - DistStoreError / RuntimeError on timeout: that rank did not report
            reports.append(None)
            continue
        reports.append(_decode(store.get(name)))
        # The store lives as long as the job: leave nothing behind (a HashStore of an old torch has no delete).
        with contextlib.suppress(Exception):
            store.delete_key(name)
    return reports


def _default_store() -> Any:
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:  # noqa: BLE001 - a backend initialised without a store (MPI), or a torch without the helper
        return None


def _gather(place: RankPlace, payload: str, device: torch.device) -> list[RankReport | None] | None:
    """gather_object: a collective, so no deadline. On NCCL it moves the objects through CUDA tensors on the
    current device, which must be this rank's own (a loop that only did model.to(f"cuda:{local_rank}") leaves
    device 0 current on every rank)."""
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * place.world_size if place.rank == 0 else None
    index = device.index if device.type == "cuda" and device.index is not None else place.local_rank
    with torch.cuda.device(index) if place.backend == "nccl" and torch.cuda.is_available() else contextlib.nullcontext():
        dist.gather_object(payload, gathered, dst=0)
    if gathered is None:
        return None
    return [_decode(p) if isinstance(p, str | bytes) else None for p in gathered]


def _decode(raw: str | bytes) -> RankReport:
    return from_jsonable(RankReport, json.loads(raw), "rank report")

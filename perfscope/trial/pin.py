"""Pin a trial process to its lane's cores: the first thing a trial does in a parallel sweep (perfscope.lanes).

Design notes: docs/measurement.md."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from perfscope.measure.cores import LANE_CPUS_ENV

__all__ = ["LANE_CPUS_ENV", "born_on", "lane_cpus", "lane_threads", "parse_cpus", "pin_to_lane"]


def parse_cpus(text: str) -> frozenset[int]:
    """'0,2-3' → {0, 2, 3} (taskset's list syntax); a bad value is an error naming the variable."""
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise ValueError(f"{LANE_CPUS_ENV}={text!r} is not a CPU list such as 0,2-3") from None
    if not cpus:
        raise ValueError(f"{LANE_CPUS_ENV}={text!r} names no CPU")
    return frozenset(cpus)


def lane_cpus(env: Mapping[str, str]) -> frozenset[int] | None:
    """The lane's CPUs named in ``env`` (a trial's environment), or None outside a parallel sweep."""
    text = env.get(LANE_CPUS_ENV)
    return parse_cpus(text) if text else None


@contextmanager
def born_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Processes started inside run on ``cpus`` from their first instruction. Linux keeps the affinity mask per
    thread and a child inherits its forking thread's mask, so the calling thread takes the lane's mask for the
    spawn and gets its own back: no pre-exec hook in the child, and the driver's other threads are unaffected."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    saved = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:  # CPUs this machine lacks (a lane planned elsewhere): the child's own pin_to_lane says so
        yield
        return
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def pin_to_lane() -> frozenset[int] | None:
    """Apply ``PERFSCOPE_LANE_CPUS`` to this process (no-op without it); the CPUs pinned to, or None."""
    cpus = lane_cpus(os.environ)
    if cpus is None or not hasattr(os, "sched_setaffinity"):
        return None
    os.sched_setaffinity(0, cpus)
    import torch

    torch.set_num_threads(lane_threads(cpus, os.environ))
    return cpus


def lane_threads(cpus: frozenset[int], env: Mapping[str, str]) -> int:
    """Intra-op threads of one process on the lane: its cores, shared among a torchrun job's ranks on the lane
    (torchrun's LOCAL_WORLD_SIZE), so that the ranks together never oversubscribe them."""
    try:
        ranks = max(int(env.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        ranks = 1
    return max(len(cpus) // ranks, 1)

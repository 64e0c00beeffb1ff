"""Pin a trial process to its lane's cores: the first thing a trial does in a parallel sweep (perfscope.lanes).

    PERFSCOPE_LANE_CPUS=2,3  → os.sched_setaffinity(0, {2, 3}) and torch.set_num_threads(2)

Why in the trial rather than around it: trials are forked from a zygote that imported torch once, and the zygote
serves every lane; a fork inherits its parent's mask, so each trial sets its own. DataLoader workers it starts
inherit the mask, so a lane's workers never spill onto another lane's cores; the intra-op thread pool is sized
to the lane (torch's default is the machine's core count, which would oversubscribe the lane's cores).
"""

from __future__ import annotations

import os

LANE_CPUS_ENV = "PERFSCOPE_LANE_CPUS"


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


def pin_to_lane() -> frozenset[int] | None:
    """Apply ``PERFSCOPE_LANE_CPUS`` to this process (no-op without it); the CPUs pinned to, or None."""
    text = os.environ.get(LANE_CPUS_ENV)
    if not text or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = parse_cpus(text)
    os.sched_setaffinity(0, cpus)
    import torch

    torch.set_num_threads(len(cpus))
    return cpus

"""The bus-bandwidth convention of NCCL-tests: one formula for a collective measured alone and one read from a trace.

    bus_bandwidth_gbps("all_reduce", 4 << 20, 0.002, world_size=2)

Its own pure module, below both users: perfscope.measure.collectives (the link alone) and
perfscope.trace.communication (the step's collectives) must compute the same figure, and measure must not import
trace for it (trace already builds on measure).
"""

from __future__ import annotations

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
"""Bus bandwidth / algorithm bandwidth (bytes / time), as NCCL-tests defines it: what each rank's link carries,
so that figures compare across world sizes and against the link's speed."""


def bus_bandwidth_gbps(op: str, nbytes: float, seconds: float, world_size: int) -> float | None:
    """Bus bandwidth in GB/s (10⁹ bytes/s) of ``nbytes`` moved by ``op`` in ``seconds`` on ``world_size`` ranks;
    None when the op has no convention (send/recv), nothing was timed, or a world of one used no link."""
    factor = BUS_FACTOR.get(op)
    if factor is None or seconds <= 0 or nbytes <= 0 or world_size < 2:
        return None
    return nbytes / seconds * factor(world_size) / 1e9

"""Stragglers from rank traces alone: the rank whose own work per step is slower than its peers', beyond the noise.

Design notes: docs/trace.md."""

from __future__ import annotations

from perfscope.results.distributed import Straggler
from perfscope.stats import STRAGGLER_MIN_SLOWER as MIN_SLOWER
from perfscope.stats import STRAGGLER_MIN_STEPS as MIN_STEPS
from perfscope.stats import slower_than_peers

OWN_WORK = "traced step minus its exposed collective time (its own work: the time it did not wait for the network or a peer)"


def trace_stragglers(own_work_s: dict[int, list[float]]) -> tuple[list[Straggler], str]:
    """(stragglers, the method in words) from each rank's own work per traced step (seconds, step order)."""
    tested = {rank: times for rank, times in own_work_s.items() if len(times) >= MIN_STEPS}
    if len(tested) < 2:
        counts = ", ".join(f"rank {r}: {len(t)}" for r, t in sorted(own_work_s.items()))
        return [], (f"not tested: it takes two ranks with at least {MIN_STEPS} traced steps each (ProfilerStep#N spans; "
                    f"{counts or 'no rank'})")
    steps = min(len(t) for t in tested.values())
    slowest = [max(tested, key=lambda r: tested[r][i]) for i in range(steps)]
    found = [s for rank in tested if (s := _test(rank, tested, slowest)) is not None]
    method = (f"each rank's mean {OWN_WORK} against the median of the other ranks' means: a straggler is over "
              f"{MIN_SLOWER:.0%} slower and slower beyond the step-to-step noise (one-sided Welch t-test, p < 0.0001); "
              f"{len(tested)} ranks, {steps} traced steps each — few steps, so only a large, steady gap is named")
    return sorted(found, key=lambda s: -s.slower_by), method


def _test(rank: int, tested: dict[int, list[float]], slowest: list[int]) -> Straggler | None:
    others = [t for r, t in tested.items() if r != rank]
    test = slower_than_peers(tested[rank], others)
    if test is None:
        return None
    mean, n, reference, critical, se = test.mean, test.n, test.reference, test.critical, test.se
    times_slowest = slowest.count(rank)
    return Straggler(
        rank=rank, slower_by=mean / reference - 1, slowest_share=times_slowest / len(slowest), cause="unknown",
        evidence=[
            f"rank {rank}'s {OWN_WORK} averaged {_ms(mean)} over {n} traced steps, {mean / reference - 1:.0%} above the "
            f"{_ms(reference)} median of the other ranks; the step-to-step noise allows {_ms(critical * se)} "
            f"({critical:.1f} standard errors)",
            f"it was the slowest rank in {times_slowest} of {len(slowest)} traced steps (chance alone: 1 in {len(tested)})",
            "from a trace alone the cause cannot be told (no GC, data-loader or host-load measurement): "
            "`perfscope analyze` measures them",
        ],
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


__all__ = ["trace_stragglers"]

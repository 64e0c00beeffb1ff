"""The report's "Lanes" section for a parallel sweep: the wall time beside the sequential estimate, the A/A
spread, and a table of the lanes (device and cores, A/A level, runs, failures, why a lane was dropped).

    view = lanes_view(results.sweep.parallel)     # None for a sweep on one lane

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.report.format import NA, Table, fmt_seconds
from perfscope.results.verdicts import ParallelSweep
from perfscope.wording import words


@dataclass(kw_only=True, slots=True)
class LanesView:
    executor: str
    wall: str  # the parallel sweep's wall time
    sequential: str  # its runs' wall times summed: about the same runs one after another
    speedup: str  # sequential / wall, or ""
    spread: str  # the lane-to-lane A/A spread
    lanes: Table  # each lane: device ("—" on a CPU), cores ("not pinned": a Slurm allocation, a Ray node), A/A level, runs, fate
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        timing = ""
        if self.sequential != NA:
            timing = (f": {self.wall} of wall time, where its runs one after another would have taken about "
                      f"{self.sequential}" + (f" (speed-up {self.speedup})" if self.speedup else ""))
        spread = f"; lane-to-lane A/A spread {self.spread}" if self.spread != NA else ""
        return f"Parallel sweep on {len(self.lanes.rows)} lane(s) through the {self.executor} executor{timing}{spread}."


def lanes_view(parallel: ParallelSweep | None) -> LanesView | None:
    if parallel is None:
        return None
    wall, sequential = parallel.wall_s, parallel.sequential_estimate_s
    lanes = Table(header=["Lane", "Device", "Cores", "A/A level (vs the median lane)", "Runs", "Failed", "Dropped"], align="rllrrrl")
    for lane in parallel.lanes:
        lanes.add(str(lane.index), f"GPU {lane.device}" if lane.device is not None else "—",
                  ",".join(map(str, lane.cpus)) if lane.cpus else "not pinned", f"{lane.level:.2f}×" if lane.level is not None else NA,
                  str(lane.runs), str(lane.failures), lane.dropped or "—")
    return LanesView(
        executor=parallel.executor,
        wall=fmt_seconds(wall) if wall is not None else NA,
        sequential=fmt_seconds(sequential) if sequential else NA,
        speedup=f"{sequential / wall:.1f}×" if wall and sequential else "",
        spread=f"{parallel.aa_spread:.1%}" if parallel.aa_spread is not None else NA,
        lanes=lanes,
        notes=[words(n) for n in parallel.notes],
    )

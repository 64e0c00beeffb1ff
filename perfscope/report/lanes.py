"""A parallel sweep's lanes in the report: one line for the sweep (executor, wall time beside the sequential
estimate, the A/A spread) and one per lane (device, cores, A/A level, runs, failures, why it was dropped)."""

from __future__ import annotations

from perfscope.report.format import fmt_seconds
from perfscope.results.lanes import ParallelSweep


def lane_notes(parallel: ParallelSweep) -> list[str]:
    lanes = parallel.lanes
    spread = f"; lane-to-lane A/A spread {parallel.aa_spread:.1%}" if parallel.aa_spread is not None else ""
    timing = ""
    if parallel.wall_s is not None and parallel.sequential_estimate_s:
        timing = (f": {fmt_seconds(parallel.wall_s)} of wall time, where its runs one after another would have taken "
                  f"about {fmt_seconds(parallel.sequential_estimate_s)}")
    out = [f"Parallel sweep on {len(lanes)} lane(s) through the {parallel.executor} executor{timing}{spread}."]
    for lane in lanes:
        where = ", ".join(filter(None, [f"GPU {lane.device}" if lane.device is not None else None,
                                        f"cores {','.join(map(str, lane.cpus))}" if lane.cpus else "cores not pinned"]))
        level = f", A/A level {lane.level:.2f}× the median lane's" if lane.level is not None else ""
        dropped = f"; dropped: {lane.dropped}" if lane.dropped else ""
        out.append(f"Lane {lane.index} ({where}){level}: {lane.runs} run(s), {lane.failures} failed{dropped}.")
    return out + list(parallel.notes)

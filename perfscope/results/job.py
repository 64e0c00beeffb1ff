"""MFU, and a recorded data-parallel job's rate and MFU denominator: pure functions of the typed results.

    flop_utilization(flops_per_step, steps_per_s, peak.tflops)   # MFU (model FLOPs) or HFU (hardware FLOPs)
    job_samples_per_s(facts.ranks)                   # all ranks' samples / the slowest rank's window
    job_steps_per_s(facts)                           # optimizer steps per second per rank, over that window
    rank_peak(results.peak, results.environment, facts.nproc_per_node)   # the peak one rank's MFU is a fraction of

Design notes: docs/results.md.
"""

from __future__ import annotations

import dataclasses

from perfscope.results.distributed import DistributedFacts, RankMetrics
from perfscope.results.model import Environment, Peak

__all__ = ["flop_utilization", "job_samples_per_s", "job_steps_per_s", "rank_peak"]


def flop_utilization(flops_per_step: float, steps_per_s: float, peak_tflops: float) -> float:
    """The one MFU formula (HFU with hardware FLOPs, the ceiling's share with a measured ceiling): achieved FLOP/s over
    the peak, a fraction. The measurement, the CI gate and schema-1 upgrades all compute it here."""
    return flops_per_step * steps_per_s / (peak_tflops * 1e12)


def job_samples_per_s(ranks: list[RankMetrics], model_parallel: int = 1) -> float | None:
    """All ranks' samples / the longest rank window (None when a rank's samples are unknown or nothing ran). The
    ``model_parallel`` (tp × pp) ranks of one replica all count the same samples: they are counted once."""
    if not ranks or any(r.samples is None for r in ranks):
        return None
    wall = max(r.wall_s for r in ranks)
    return sum(r.samples or 0 for r in ranks) / model_parallel / wall if wall > 0 else None


def job_steps_per_s(facts: DistributedFacts) -> float | None:
    """Optimizer steps per second per rank for the job: every rank's steps / world size / the slowest window.

    None unless every rank of the world reported a timed window (a job figure without a rank would be a guess)."""
    ranks = facts.ranks
    if not ranks or len(ranks) != facts.world_size or any(r.steps <= 0 or r.wall_s <= 0 for r in ranks):
        return None
    return sum(r.steps for r in ranks) / len(ranks) / max(r.wall_s for r in ranks)


def rank_peak(peak: Peak | None, env: Environment, ranks_per_node: int = 1) -> Peak | None:
    """The peak one rank's MFU is a fraction of: the run's ``peak``, except where the ranks of a node share one CPU.

    On CPU the peak (datasheet or measured ceiling) is the whole processor's, and every rank of the node computes on
    it: each rank's share is peak / ranks per node. A GPU rank has its own device, so its peak is the device's.
    """
    if peak is None or env.device_type != "cpu" or ranks_per_node <= 1:
        return peak
    return dataclasses.replace(peak, tflops=peak.tflops / ranks_per_node,
                               source=f"{peak.source}, shared by the node's {ranks_per_node} ranks")

"""Stragglers: ranks whose own compute is slower than their peers' beyond the step-to-step noise.

    stragglers, method = find_stragglers(ranks)     # list[Straggler], how they were decided

Why compute, not step time: in synchronous data parallelism every rank's step ends at the same all-reduce, so
step times are equal by construction and a slow rank shows up as its peers' waiting. Each rank therefore also
runs a short window without gradient communication (RankMetrics.local_step_times_s): its own compute, which no
peer can slow down. Which rank is slowest in each step says whether it is the same rank every step (a slow
device, a data shard, a busy host) or chance.
"""

from __future__ import annotations

from perfscope.results.distributed import RankMetrics, Straggler


def find_stragglers(ranks: list[RankMetrics]) -> tuple[list[Straggler], str]:
    """(stragglers, method in words); no stragglers when fewer than two ranks have a local window."""
    return [], "not implemented"

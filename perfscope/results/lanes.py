"""A parallel sweep's lanes in the results model: what each lane owned, how it compared with the others (its A/A
check), what it ran and why it stopped, and the wall time beside the sequential estimate.

Why a module of its own: these describe *where* the sweep's runs ran (perfscope.lanes), not what they measured
(model.py) nor what the sweep concluded (verdicts.py); the report's lanes table reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.results.constraints import NON_NEGATIVE, SECONDS
from perfscope.results.messages import Message

__all__ = ["LaneRecord", "ParallelSweep"]


@dataclass(kw_only=True)
class LaneRecord:
    """One lane: a device (or none, on a CPU) and a disjoint set of CPU cores, with its own baseline series."""

    index: int = field(metadata=NON_NEGATIVE)
    device: str | None = None
    """The lane's accelerator (its CUDA_VISIBLE_DEVICES value), None on a CPU-only lane."""
    cpus: list[int] = field(default_factory=list)
    """The cores its runs were pinned to (empty: not pinned, e.g. a remote Slurm or Ray lane)."""
    level: float | None = None
    """Its A/A baseline throughput over the median lane's (1.0 = the median lane; 0.67 = 1.5× slower)."""
    runs: int = field(default=0, metadata=NON_NEGATIVE)
    failures: int = field(default=0, metadata=NON_NEGATIVE)
    """Runs on this lane that did not finish with a measurement (any status but ok)."""
    dropped: str | None = None
    """Why the lane took no more runs: an A/A outlier, or the executor's reason for losing its job."""


@dataclass(kw_only=True)
class ParallelSweep:
    """How the sweep ran in parallel: the executor, its lanes, and what that saved."""

    executor: str
    """local | ray | slurm."""
    lanes: list[LaneRecord] = field(default_factory=list)
    aa_spread: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Lane-to-lane spread of the A/A baseline: the standard deviation of the kept lanes' log levels."""
    wall_s: float | None = field(default=None, metadata=SECONDS)
    """Wall time of the sweep's runs, lanes in parallel."""
    sequential_estimate_s: float | None = field(default=None, metadata=SECONDS)
    """The sum of every run's wall time: about what the same runs would have taken one after another."""
    notes: list[Message] = field(default_factory=list)

"""Tiny models and data for the framework integration tests, the tests' own wall-clock truth, and simulated time."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from perfscope.measure.clock import HostClock
from perfscope.results import Results
from tests.flops_oracle import linear_training_flops

IN, HIDDEN, CLASSES = 64, 256, 4
STALL_EVERY, STALL_S = 256, 0.06
SIMULATED_COMPUTE_S, SIMULATED_STALL_S = 2.0**-6, 2.0**-3
"""A simulated step's compute and a simulated loader stall: binary fractions, so every sum of them is exact."""


@dataclass
class SimulatedTime:
    """Time that passes only when the test says so: the Profiler's clock (``clock()``) reads it, the loop ``spend``s
    it (a step's compute, a loader's stall). What the machine really takes (a loaded neighbour, the framework's own
    work) is invisible, so every figure the hooks compute from it is exact and cannot move with load.

    ``stalls`` are the simulated times the loader's stalls began, ``marks`` what the test noted (e.g. step ends)."""

    now: float = 0.0
    stalls: list[float] = field(default_factory=list)
    marks: dict[int, float] = field(default_factory=dict)

    def __call__(self) -> float:
        return self.now

    def clock(self) -> HostClock:
        return HostClock(now=self)

    def spend(self, seconds: float) -> None:
        self.now += seconds

    def stall(self, seconds: float = SIMULATED_STALL_S) -> None:
        self.stalls.append(self.now)
        self.spend(seconds)

    def stalls_between(self, start: float, end: float) -> int:
        """The stalls that began in [start, end): those inside the steps that ended there."""
        return sum(start <= t < end for t in self.stalls)


def load(callback: Any) -> Results:
    """The results a framework callback saved (either adapter: both record where in ``saved``)."""
    assert callback.saved is not None, "the callback saved nothing"
    return Results.load(callback.saved)


def mlp_flops(batch: int, hidden: int = HIDDEN) -> int:
    """Model FLOPs of one training micro-step of the MLP below (the input needs no gradient)."""
    return (linear_training_flops(batch, IN, hidden, input_requires_grad=False)
            + linear_training_flops(batch, hidden, CLASSES, input_requires_grad=True))


def mlp(hidden: int = HIDDEN) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(IN, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES))


class Points(torch.utils.data.Dataset):
    """Random points and labels; with ``stall``, the loading of every 256th sample takes 60 ms (a data pipeline
    whose worker stalls now and then: the step times become bimodal, the throughput is set by the stalls), or,
    with ``simulated``, that simulated time's stall instead of a real sleep (in the main process: no workers).
    ``on_fetch`` is called as each sample is loaded (in the main process when there are no workers)."""

    def __init__(self, n: int, *, stall: bool = False, seed: int = 0, on_fetch: Callable[[], None] | None = None,
                 simulated: SimulatedTime | None = None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x, self.y = torch.randn(n, IN, generator=g), torch.randint(0, CLASSES, (n,), generator=g)
        self.stall = stall
        self.on_fetch = on_fetch
        self.simulated = simulated

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.on_fetch is not None:
            self.on_fetch()
        if self.stall and i % STALL_EVERY == STALL_EVERY - 1:
            if self.simulated is not None:
                self.simulated.stall()
            else:
                time.sleep(STALL_S)
        return self.x[i], self.y[i]


@dataclass
class WallClock:
    """The test's own record of a run, on the host clock, taken by a callback registered next to perfscope's: when
    each optimizer step started and ended, its samples, and the intervals that were not training (evaluation,
    checkpoint saving). A step's time starts at the previous step's end, or at the end of a pause before it; a
    step that a pause split in two is left out (its time would be two halves of different circumstances)."""

    steps: dict[int, tuple[float, float, int]] = field(default_factory=dict)  # global step -> (start, end, samples)
    pauses: list[tuple[float, float]] = field(default_factory=list)
    mark: float = 0.0  # where the next step's time starts
    last_batch_end: float = 0.0
    pending: int = 0  # samples of the step's micro-batches so far
    split: bool = False
    pause_start: float | None = None

    def batch_start(self, samples: int) -> None:
        self.end_pause()  # evaluation and checkpoint saving are over once training has a batch again ...
        self.pending += samples

    def fetch(self) -> None:
        self.end_pause()  # ... or, where the test's dataset can tell, once training asks for one

    def batch_end(self) -> None:
        self.last_batch_end = time.perf_counter()

    def start_pause(self) -> None:
        """Evaluation or saving begins: what the framework did since the last batch's compute is part of it."""
        if self.pause_start is None:
            self.pause_start = self.last_batch_end
            self.split = self.split or self.pending > 0

    def end_pause(self) -> None:
        if self.pause_start is not None:
            now = time.perf_counter()
            self.pauses.append((self.pause_start, now))
            self.pause_start = None
            if not self.split:
                self.mark = now

    def pause_done(self) -> None:
        """A pause reported once done (the Trainer's on_evaluate, on_save): it ran since the last mark."""
        now = time.perf_counter()
        self.pauses.append((self.mark, now))
        self.mark = now

    def step_end(self, step: int, samples: int | None = None) -> None:
        now = self.last_batch_end = time.perf_counter()
        if not self.split:
            self.steps[step] = (self.mark, now, self.pending if samples is None else samples)
        self.mark, self.pending, self.split = now, 0, False

    def samples_per_s(self, first: int, last: int) -> float:
        """Samples over time of the unsplit steps first+1..last: what a profiler of this run should report."""
        kept = [self.steps[k] for k in range(first + 1, last + 1) if k in self.steps]
        return sum(n for _, _, n in kept) / sum(end - start for start, end, _ in kept)

    def paused_s(self) -> float:
        return sum(b - a for a, b in self.pauses)


def visible_text(html: str) -> str:
    """A report page as a reader sees it: no scripts or styles, tags as spaces."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))

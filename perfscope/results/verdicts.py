"""The sweep's verdicts in the results model: a measured gain, a rule's finding, each knob's outcome, the
micro-batch curve, the parallel lanes the runs ran on, and the sweep that holds them.

Design notes: docs/results.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from perfscope.results.constraints import FRACTION, NAME, NON_NEGATIVE, SECONDS
from perfscope.results.messages import Message, msg

__all__ = [
    "Finding", "Gain", "KnobOutcome", "LaneRecord", "MicroBatchPoint", "NumericsCheck", "ParallelSweep", "RunNoise", "Sweep",
    "Verdict",
]


Verdict = Literal["faster", "slower", "same", "undecided"]


@dataclass(kw_only=True)
class Gain:
    """A measured change in throughput against a reference, from fresh-process runs (``ratio`` > 1 is faster;
    [low, high] its ``confidence`` interval; ``verdict`` and ``mde``: docs/results.md)."""

    ratio: float = field(metadata=NON_NEGATIVE)
    low: float = field(metadata=NON_NEGATIVE)
    high: float | None = field(metadata=NON_NEGATIVE)
    """The interval's upper end; unbounded (inf) when one run each side says nothing about the noise. JSON has
    no Infinity, so the file stores null, and loading turns it back into inf (__post_init__)."""
    confidence: float = field(metadata=FRACTION)
    verdict: Verdict = "undecided"
    runs: int = field(default=1, metadata=NON_NEGATIVE)
    """Candidate runs used."""
    reference: str = "baseline"
    """The configuration the ratio is measured against."""
    reference_runs: int = field(default=1, metadata=NON_NEGATIVE)
    mde: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Minimum detectable effect: the smallest relative change (e.g. 0.08 = 8%) these runs detect reliably."""
    method: str = ""
    rate: float | None = field(default=None, metadata=NON_NEGATIVE)
    reference_rate: float | None = field(default=None, metadata=NON_NEGATIVE)
    """samples/s of the candidate's runs and of the reference runs paired with them (geometric means), so that
    ratio == rate / reference_rate: the figures a report shows next to the gain. None where the comparison did
    not record them (report/reference.py then recomputes them from the runs)."""

    def __post_init__(self) -> None:
        if self.high is None:
            self.high = math.inf

    @property
    def significant(self) -> bool:
        return self.verdict in ("faster", "slower")

    @property
    def faster(self) -> bool:
        return self.verdict == "faster"


@dataclass(kw_only=True)
class Finding:
    """One diagnosed bottleneck and its fix, as produced by a rule (rules never rank; the engine does)."""

    rule_id: str = field(metadata=NAME)
    title: str
    severity: Literal["high", "medium", "low", "info"]
    evidence: list[str]
    fix: str  # the code change, diff-style where it applies
    gain: Gain | None = None  # measured
    estimated_gain: float | None = field(default=None, metadata=NON_NEGATIVE)  # estimated speed-up ratio, when not measured
    estimate_method: str | None = None
    """How the estimate was made and what it assumes."""
    upper_bound: bool = False
    """The estimate is a bound (the whole cause removed), worded "up to", not a point estimate."""
    estimate_bound: str | None = None
    """The limit of this machine that bounds the estimate (e.g. the cores left for DataLoader workers, the device
    memory a larger micro-batch must fit in, the share of the step the fix can shrink)."""
    cause_share: float | None = field(default=None, metadata=FRACTION)
    """The share of the baseline's measured time the named cause took (data wait, GC pauses, exposed collectives, ...);
    None where the run saw only the symptom. A measured cause ranks before any estimate (perfscope.ranking)."""
    addresses: list[str] = field(default_factory=list)
    """Slices of the baseline's step-time breakdown the fix acts on (keys of perfscope.results.breakdown.SLICES;
    "step" for every slice); empty when it acts on memory or numerics, not on step time."""
    caveats: list[Message] = field(default_factory=list)  # semantics changes; the code is the kind ("numerics", ...)
    reference: str | None = None
    trial: str | None = None  # the configuration that measured the gain
    why_not_here: str | None = None
    """When the fix was measured and did not help on this machine: the rule's account of why (e.g. bf16
    autocast on a CPU without bf16 matrix units), so the reader knows whether it would help elsewhere."""

    @property
    def measured_win(self) -> bool:
        """The fix was measured on this machine and found decidedly faster: only then is a measurement a win."""
        return self.gain is not None and self.gain.faster and self.gain.ratio > 1

    @property
    def measured_no_help(self) -> bool:
        """Measured here as slower, the same, or undecided: measured beats believed, it is not a ranked fix."""
        return self.gain is not None and not self.measured_win


@dataclass(kw_only=True)
class NumericsCheck:
    """What the numerics guard compared between a run and the baseline's run, and its verdict (docs/sweep.md)."""

    reference: str = field(metadata=NAME)
    """The run compared against (the baseline's first run)."""
    method: Literal["step by step", "loss level", "recipe"]
    """Each step's loss; the mean loss (another micro-batch or accumulation: other samples per step); the mean
    loss and the first-step gradient norm (another optimizer)."""
    first_step: int = field(metadata=NON_NEGATIVE)
    last_step: int = field(metadata=NON_NEGATIVE)
    global_steps: bool = True
    """False: a run recorded before perfscope counted its steps before the window; the steps are then indices of
    the measured steps, which need not be the same global steps in both runs."""
    samples_per_step: int | None = field(default=None, metadata=NON_NEGATIVE)
    """Samples per step of both runs when they are the same (step by step), else None."""
    ok: bool = True
    reason: Message | None = None
    """Why the guard rejected the run (None: it did not)."""
    max_relative_diff: float | None = field(default=None, metadata=NON_NEGATIVE)
    tolerance: float = field(default=0.0, metadata=NON_NEGATIVE)

    @property
    def message(self) -> Message:
        """The verdict, as the knob table shows it: its reason, or how close the losses were; and which steps."""
        steps = msg("numerics_steps", first=self.first_step, last=self.last_step, global_steps=self.global_steps,
                    samples_per_step=self.samples_per_step)
        if not self.ok:
            return msg("numerics_rejected", reason=self.reason, steps=steps)
        return msg("numerics_within", method=self.method, steps=steps, diff=self.max_relative_diff,
                   tolerance=self.tolerance)


@dataclass(kw_only=True)
class KnobOutcome:
    """One knob tried alone on top of the baseline (or why it was not tried)."""

    knob: str = field(metadata=NAME)  # stable knob id, e.g. "amp_bf16"
    title: str
    status: Literal["measured", "skipped", "inapplicable", "failed", "rejected"]
    reason: list[Message] = field(default_factory=list)
    """Why skipped / inapplicable / failed / rejected (e.g. the numerics guard), and what qualifies a measured gain
    (several can accumulate: the best of variants, a failed join to the stack)."""
    trial: str | None = None
    """The configuration that measured it (its runs are the trials of that configuration)."""
    setting: str | None = None
    """The winning value in words, e.g. "micro-batch 32 × accumulation 2", "4 workers"."""
    gain: Gain | None = None
    mfu: float | None = field(default=None, metadata=NON_NEGATIVE)
    changes_semantics: list[Message] = field(default_factory=list)  # e.g. msg("numerics", change=msg("bf16_matmuls"))
    code_change: str | None = None


@dataclass(kw_only=True)
class MicroBatchPoint:
    """One point of the micro-batch search (throughput and memory vs micro-batch, OOMs included)."""

    micro_batch_size: int = field(metadata=NON_NEGATIVE)
    grad_accum_steps: int = field(metadata=NON_NEGATIVE)
    trial: str
    status: str
    samples_per_s: float | None = field(default=None, metadata=NON_NEGATIVE)
    peak_memory_bytes: int | None = field(default=None, metadata=NON_NEGATIVE)


@dataclass(kw_only=True)
class RunNoise:
    """Run-to-run noise of this machine, from the baseline's repeated fresh-process runs."""

    runs: int = field(metadata=NON_NEGATIVE)
    """Baseline runs used (contended or outlying runs excluded)."""
    sigma: float | None = field(metadata=NON_NEGATIVE)
    """Standard deviation of log throughput between runs (≈ relative spread), from successive differences."""
    mde: float | None = field(default=None, metadata=NON_NEGATIVE)
    """Smallest relative change a single paired comparison could detect at this noise."""


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


@dataclass(kw_only=True)
class Sweep:
    """The search: each knob alone, the stacked recommendation, and the micro-batch curve."""

    baseline_trial: str
    """The baseline configuration's name."""
    recommended_trial: str | None = None
    """The recommended configuration's name (the baseline's when nothing is significantly faster)."""
    recommended_knobs: list[str] = field(default_factory=list)
    recommended_gain: Gain | None = None
    knobs: list[KnobOutcome] = field(default_factory=list)
    micro_batch: list[MicroBatchPoint] = field(default_factory=list)
    noise: RunNoise | None = None
    budget_s: float | None = field(default=None, metadata=SECONDS)
    elapsed_s: float | None = field(default=None, metadata=SECONDS)
    stopped_early: Message | None = None
    """Why the sweep stopped before its end (its budget, the user, every lane lost); None: it ran to its end."""
    unfinished: list[str] = field(default_factory=list)
    """What a sweep that stopped early did not finish (knobs not measured, winners not stacked, the confirmation
    runs): its recommendation is the configuration decided before it (perfscope.search.decided)."""
    notes: list[Message] = field(default_factory=list)
    parallel: ParallelSweep | None = None
    """The lanes the sweep ran on (perfscope.lanes); None for a sweep on one lane, one run after another."""

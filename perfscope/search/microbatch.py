"""Micro-batch search: the largest micro-batch that fits with a safety margin, and throughput vs micro-batch.

Design notes: docs/sweep.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfscope.results import MicroBatchPoint, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg

MEMORY_MARGIN = 0.90  # a micro-batch using more than this share of device memory is too close to OOM
PLATEAU = 1.03  # stop doubling when throughput improves by less than 3%
BUDGET_EXHAUSTED = msg("budget_exhausted")

Measure = Callable[[str, TrialConfig, list[str]], Trial]


@dataclass
class MicroBatchResult:
    points: list[MicroBatchPoint] = field(default_factory=list)
    trials: dict[int, Trial] = field(default_factory=dict)  # micro-batch -> its trial (ok or not)
    hit_oom: bool = False
    stopped: Message | None = None
    """Why the doubling stopped short of an OOM (None: it ran out of memory)."""
    stopped_by_memory: bool = False
    """The search stopped at the memory margin (not at an OOM, a plateau or the cap)."""

    @property
    def memory_limited(self) -> bool:
        return self.hit_oom or self.stopped_by_memory

    def best(self, *, preserve_global: int | None) -> Trial | None:
        """Fastest fitting run (samples/s of its window) with margin; only the global batch ``preserve_global``
        when given. A selection, not a verdict: the sweep compares the chosen point's runs with the baseline's."""
        candidates = [
            t for t in self.trials.values()
            if t.ok and _has_margin(t) and (preserve_global is None or t.metrics.samples_per_step == preserve_global)  # type: ignore[union-attr]
        ]
        if not candidates:
            return None
        return max(candidates, key=_throughput)

    def largest_fitting(self) -> int | None:
        fitting = [m for m, t in self.trials.items() if t.ok]
        return max(fitting) if fitting else None


def _has_margin(trial: Trial) -> bool:
    m = trial.metrics
    if m is None or not m.device_memory_capacity_bytes or m.peak_reserved_bytes is None:
        return True  # CPU: no device capacity to respect
    return m.peak_reserved_bytes <= MEMORY_MARGIN * m.device_memory_capacity_bytes


def micro_config(base: TrialConfig, micro: int) -> TrialConfig:
    """Keep the global batch when ``micro`` divides it; otherwise one micro-batch per step."""
    global_batch = base.samples_per_step
    if micro <= global_batch and global_batch % micro == 0:
        return base.replace(micro_batch_size=micro, grad_accum_steps=global_batch // micro)
    return base.replace(micro_batch_size=micro, grad_accum_steps=1)


def _point(micro: int, trial: Trial) -> MicroBatchPoint:
    m = trial.metrics
    return MicroBatchPoint(micro_batch_size=micro, grad_accum_steps=trial.config.grad_accum_steps, trial=trial.name,
                           status=trial.status, samples_per_s=m.samples_per_s if m is not None and trial.ok else None,
                           peak_memory_bytes=m.peak_memory_bytes if m is not None else None)


def _throughput(trial: Trial) -> float:
    return (trial.metrics.samples_per_s or 0.0) if trial.ok and trial.metrics else 0.0


def search_micro_batch(measure: Measure, base_config: TrialConfig, base_trial: Trial, *, name_prefix: str = "mb",
                       knobs: list[str] | None = None, max_factor: int = 64,
                       may_continue: Callable[[], bool] = lambda: True) -> MicroBatchResult:
    result = MicroBatchResult()
    start = base_config.micro_batch_size
    result.trials[start] = base_trial
    result.points.append(_point(start, base_trial))
    last_ok, micro = base_trial, start * 2
    oom_at: int | None = None
    while micro <= start * max_factor:
        if not may_continue():
            result.stopped = BUDGET_EXHAUSTED
            break
        trial = measure(f"{name_prefix}{micro}", micro_config(base_config, micro), list(knobs or []) + ["micro_batch"])
        result.trials[micro] = trial
        result.points.append(_point(micro, trial))
        if trial.status == "oom":
            result.hit_oom, oom_at = True, micro
            break
        if not trial.ok:
            result.stopped = msg("micro_batch_ended", micro=micro, status=trial.status)
            break
        if not _has_margin(trial):
            result.stopped = msg("micro_batch_memory_margin", micro=micro, margin=MEMORY_MARGIN)
            result.stopped_by_memory = True
            break
        if trial.evidence and last_ok.evidence and _throughput(trial) < PLATEAU * _throughput(last_ok):
            result.stopped = msg("micro_batch_plateau", micro=micro)
            break
        last_ok, micro = trial, micro * 2
    else:
        result.stopped = msg("micro_batch_cap", factor=max_factor)
    if oom_at is not None and may_continue():
        lo = result.largest_fitting() or start
        mid = (lo + oom_at) // 2
        if mid >= 16:
            mid -= mid % 8  # tile-friendly sizes
        if lo < mid < oom_at:
            trial = measure(f"{name_prefix}{mid}", micro_config(base_config, mid), list(knobs or []) + ["micro_batch"])
            result.trials[mid] = trial
            result.points.append(_point(mid, trial))
    result.points.sort(key=lambda p: p.micro_batch_size)
    return result

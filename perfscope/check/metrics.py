"""What the CI gate can compare: per-step samples of MFU, samples/s or step time, read from a results file.

    >>> MFU.values(Side(results, results.trial("baseline")))   # one MFU value per measured step

The gate decides on per-step samples, never on one summary number, so each metric is defined as a
transform of ``TrialMetrics.step_times_s``: for a fixed workload MFU and samples/s are k / step time
(k = FLOPs per step / peak, or samples per step), step time is itself. Transforming the samples, rather
than assuming proportionality, keeps the comparison honest when a user accepts a mismatch (another
FLOP count or peak) with ``--allow-mismatch``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from perfscope.results import Results, Trial, TrialMetrics


class MetricUnavailable(ValueError):
    """The metric cannot be computed from this results file (the reason says why and what to do)."""


@dataclass(frozen=True, kw_only=True)
class Side:
    """One side of a comparison: a results file and the trial picked from it."""

    results: Results
    trial: Trial
    source: str = ""  # where the results came from, for messages (a path)


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A gateable metric: how to get its per-step values, which way is better, how to print a value."""

    id: str
    title: str
    higher_is_better: bool
    per_step: Callable[[Results, TrialMetrics], list[float]]
    format: Callable[[float], str]

    def values(self, side: Side) -> list[float]:
        metrics = side.trial.metrics
        if metrics is None:
            raise MetricUnavailable(f"trial {side.trial.name!r} has no metrics (status {side.trial.status})")
        bad = [t for t in metrics.step_times_s if not (math.isfinite(t) and t > 0)]
        if bad:
            raise MetricUnavailable(f"trial {side.trial.name!r} has non-positive or non-finite step times: {bad[:3]}")
        return self.per_step(side.results, metrics)


def _mfu_per_step(results: Results, metrics: TrialMetrics) -> list[float]:
    if metrics.flops_per_step is None:
        why = metrics.unavailable.get("flops_per_step") or metrics.unavailable.get("mfu") or "no FLOP count recorded"
        raise MetricUnavailable(f"MFU unavailable ({why}); gate on --metric samples_per_s or step_time instead")
    if results.peak is None:
        why = results.environment.unavailable.get("peak") or "no peak FLOP/s recorded"
        raise MetricUnavailable(
            f"MFU unavailable ({why}); re-run analyze with --peak-tflops, or gate on --metric samples_per_s"
        )
    k = metrics.flops_per_step / (results.peak.tflops * 1e12)
    return [k / t for t in metrics.step_times_s]


def _samples_per_s_per_step(results: Results, metrics: TrialMetrics) -> list[float]:
    return [metrics.samples_per_step / t for t in metrics.step_times_s]


def _step_time_per_step(results: Results, metrics: TrialMetrics) -> list[float]:
    return list(metrics.step_times_s)


MFU = Metric(
    id="mfu",
    title="MFU",
    higher_is_better=True,
    per_step=_mfu_per_step,
    format=lambda v: f"{v * 100:.2f}%",
)
SAMPLES_PER_S = Metric(
    id="samples_per_s",
    title="samples/s",
    higher_is_better=True,
    per_step=_samples_per_s_per_step,
    format=lambda v: f"{v:,.1f}",
)
STEP_TIME = Metric(
    id="step_time",
    title="step time",
    higher_is_better=False,
    per_step=_step_time_per_step,
    format=lambda v: f"{v * 1e3:,.2f} ms",
)

METRICS: dict[str, Metric] = {m.id: m for m in (MFU, SAMPLES_PER_S, STEP_TIME)}

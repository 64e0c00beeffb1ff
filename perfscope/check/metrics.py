"""What the CI gate can compare: one value per run of MFU, samples/s or step time, read from results files.

    >>> SAMPLES_PER_S.per_run(side)        # [412.0, 398.5, 405.1]: one value per fresh-process run

Design notes: docs/ci-gate.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from perfscope.results import Peak, Results, Trial, TrialMetrics
from perfscope.results.job import flop_utilization, job_steps_per_s, rank_peak
from perfscope.results.messages import Message, msg


class MetricUnavailable(ValueError):
    """The metric cannot be computed from this results file (``why``: a message saying why and what to do)."""

    def __init__(self, why: Message) -> None:
        super().__init__(why.code)
        self.why = why


@dataclass(frozen=True, kw_only=True)
class Side:
    """One side of a comparison: the runs of the gated configuration, from one or more results files."""

    results: Results
    """The first file (environment, workload, peak used for identity checks)."""
    runs: list[Trial]
    source: str = ""
    peak: Peak | None = None
    """The MFU denominator (defaults to the file's)."""
    files: list[Results] = field(default_factory=list)

    @property
    def trial(self) -> Trial:
        """The first run: its config stands for the side's (all runs of a configuration share it)."""
        return self.runs[0]

    @property
    def mfu_peak(self) -> Peak | None:
        return self.peak if self.peak is not None else self.results.peak


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A gateable metric: its value per run, which way is better, how to print a value."""

    id: str
    title: str
    higher_is_better: bool
    value: Callable[[Side, TrialMetrics], float]
    per_step: Callable[[Side, TrialMetrics], list[float]]
    format: Callable[[float], str]

    def per_run(self, side: Side) -> list[float]:
        values = []
        for run in side.runs:
            m = _checked(run)
            values.append(self.value(side, m))
        return values

    def steps(self, side: Side) -> list[float]:
        return [v for run in side.runs for v in self.per_step(side, _checked(run))]


def _checked(run: Trial) -> TrialMetrics:
    m = run.metrics
    if m is None:
        raise MetricUnavailable(msg("metric_run_no_metrics", name=run.name, status=run.status))
    if not (math.isfinite(m.wall_s) and m.wall_s > 0 and m.steps > 0):
        raise MetricUnavailable(msg("metric_run_no_window", name=run.name, wall_s=m.wall_s, steps=m.steps))
    return m


def _mfu_factor(side: Side, m: TrialMetrics) -> float:
    if m.flops_per_step is None:
        raise MetricUnavailable(msg("mfu_no_flop_count", why=m.unavailable.get("flops_per_step") or m.unavailable.get("mfu")))
    peak = side.mfu_peak
    if peak is not None and m.distributed is not None:  # the report's denominator: one rank's share on CPU
        peak = rank_peak(peak, side.results.environment, m.distributed.nproc_per_node)
    if peak is None:
        raise MetricUnavailable(msg("mfu_no_peak"))
    return flop_utilization(m.flops_per_step, 1.0, peak.tflops)  # per optimizer step per second


def _steps_per_s(m: TrialMetrics) -> float:
    """Optimizer steps per second of the run; for a data-parallel job, per rank over the slowest rank's window
    (perfscope.results.job, as the report's), so MFU and step time gate the job as samples/s does."""
    if m.distributed is not None:
        rate = job_steps_per_s(m.distributed)
        if rate is None:
            raise MetricUnavailable(msg("job_step_rate_unknown", why=m.distributed.unavailable.get("job_samples_per_s")))
        return rate
    return m.steps / m.wall_s


MFU = Metric(
    id="mfu", title="MFU", higher_is_better=True,
    value=lambda side, m: _mfu_factor(side, m) * _steps_per_s(m),
    per_step=lambda side, m: [_mfu_factor(side, m) / t for t in m.step_times_s if t > 0],
    format=lambda v: f"{v * 100:.2f}%",
)
SAMPLES_PER_S = Metric(
    id="samples_per_s", title="samples/s", higher_is_better=True,
    value=lambda side, m: _samples_per_s(m),
    per_step=lambda side, m: [m.samples_per_step / t for t in m.step_times_s if t > 0],
    format=lambda v: f"{v:,.1f}",
)
STEP_TIME = Metric(
    id="step_time", title="step time", higher_is_better=False,
    value=lambda side, m: 1.0 / _steps_per_s(m) if m.distributed is not None else m.wall_s / m.steps,
    per_step=lambda side, m: [t for t in m.step_times_s if t > 0],
    format=lambda v: f"{v * 1e3:,.2f} ms",
)


def _samples_per_s(m: TrialMetrics) -> float:
    if m.samples_per_s is None:
        raise MetricUnavailable(msg("samples_per_s_unavailable", why=m.unavailable.get("samples_per_s")))
    return m.samples_per_s


METRICS: dict[str, Metric] = {m.id: m for m in (MFU, SAMPLES_PER_S, STEP_TIME)}

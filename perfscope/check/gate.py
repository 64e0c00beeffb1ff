"""The gate: pick the trials, refuse incomparable runs, evaluate every metric check, collect the verdicts.

    >>> report = run_gate(Results.load("current.json"), Results.load("baseline.json"), GateOptions())
    >>> report.outcome          # "pass" | "regression" | "inconclusive" | "unusable"

Every verdict is collected before anything is reported (pytest-benchmark's compare does the same), so
one run shows every regressed metric at once. Exit codes belong to the CLI; this returns data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from perfscope.check.compat import Difference, find_differences
from perfscope.check.decision import MetricCheck, Verdict
from perfscope.check.metrics import METRICS, MetricUnavailable, Side
from perfscope.results import Results, Trial

Outcome = Literal["pass", "regression", "inconclusive", "unusable"]

RECOMMENDED = "recommended"
"""--trial value meaning "each file's sweep-recommended trial" (their names may differ)."""


@dataclass(frozen=True, kw_only=True)
class GateOptions:
    metrics: tuple[str, ...] = ("mfu",)
    """Metric ids to gate (keys of perfscope.check.metrics.METRICS); one verdict each."""
    max_drop: float = 0.05
    """Tolerated worsening as a fraction: a fall for MFU and samples/s, a rise for step time."""
    trial: str = "baseline"
    """Trial compared in both files, or "recommended" for each file's sweep recommendation."""
    allow_mismatch: bool = False
    """Compare runs whose device, dtype, peak or workload differ (the differences become warnings)."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics:
            raise ValueError(f"unknown metrics {unknown}; choose from {sorted(METRICS)}")
        if not 0 <= self.max_drop < 1:
            raise ValueError(f"max_drop must be in [0, 1), got {self.max_drop}")


@dataclass(kw_only=True)
class GateReport:
    """Everything the gate found, ready for the table, Markdown and JUnit renderers."""

    options: GateOptions
    current_source: str = ""
    baseline_source: str = ""
    current_trial: str | None = None
    baseline_trial: str | None = None
    errors: list[str] = field(default_factory=list)  # unusable input: nothing was compared
    differences: list[Difference] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the comparison was made, shown with the warnings

    @property
    def blocking_differences(self) -> list[Difference]:
        return [d for d in self.differences if d.blocking]

    @property
    def warnings(self) -> list[str]:
        """Differences that did not stop the comparison (always-soft ones, or all with --allow-mismatch)."""
        if self.blocking_differences and not self.options.allow_mismatch:
            return [str(d) for d in self.differences if not d.blocking] + self.notes
        return [str(d) for d in self.differences] + self.notes

    @property
    def outcome(self) -> Outcome:
        if self.errors or (self.blocking_differences and not self.options.allow_mismatch):
            return "unusable"
        statuses = {v.status for v in self.verdicts}
        if "regression" in statuses:
            return "regression"
        if "inconclusive" in statuses or not self.verdicts:
            return "inconclusive"
        return "pass"


def _pick_trial(results: Results, name: str, role: str) -> tuple[Trial | None, str | None]:
    """The trial to compare from one file, or why there is none."""
    if name == RECOMMENDED:
        if results.sweep is None or results.sweep.recommended_trial is None:
            return None, f"the {role} results have no sweep-recommended trial (--trial {RECOMMENDED})"
        name = results.sweep.recommended_trial
    trial = results.trial(name)
    if trial is None:
        known = ", ".join(t.name for t in results.trials) or "none"
        return None, f"the {role} results have no trial {name!r} (trials: {known})"
    return trial, None


def _both_measured_ceilings(current: Results, baseline: Results) -> bool:
    peaks = (current.peak, baseline.peak)
    same_device = current.environment.device_name == baseline.environment.device_name
    return same_device and all(p is not None and p.source.startswith("measured matmul ceiling") for p in peaks)


def run_gate(
    current: Results,
    baseline: Results,
    options: GateOptions,
    *,
    current_source: str = "",
    baseline_source: str = "",
) -> GateReport:
    report = GateReport(options=options, current_source=current_source, baseline_source=baseline_source)
    cur_trial, cur_error = _pick_trial(current, options.trial, "current")
    base_trial, base_error = _pick_trial(baseline, options.trial, "baseline")
    report.errors += [e for e in (cur_error, base_error) if e]
    if cur_trial is None or base_trial is None:
        return report
    report.current_trial, report.baseline_trial = cur_trial.name, base_trial.name
    if not base_trial.ok:
        report.errors.append(
            f"baseline trial {base_trial.name!r} did not succeed (status {base_trial.status}: {base_trial.error}); "
            "record a new baseline with `perfscope baseline update`"
        )
        return report

    if _both_measured_ceilings(current, baseline):
        # A measured ceiling is a noisy reading of the same machine, not a property of the run: judge MFU
        # against the baseline's, so MFU moves exactly with throughput (what a datasheet peak guarantees).
        current = dataclasses.replace(current, peak=baseline.peak)
        report.notes.append("both peaks are measured matmul ceilings: MFU uses the baseline's for both runs")
    cur_side = Side(results=current, trial=cur_trial, source=current_source)
    base_side = Side(results=baseline, trial=base_trial, source=baseline_source)
    report.differences = find_differences(cur_side, base_side, metric_ids=options.metrics)
    if report.blocking_differences and not options.allow_mismatch:
        return report

    for metric_id in options.metrics:
        check = MetricCheck(metric=METRICS[metric_id], max_drop=options.max_drop)
        if not cur_trial.ok:
            # The code under test broke the run (OOM, crash, non-finite loss): that is a regression, not noise.
            report.verdicts.append(Verdict(
                metric=check.metric, status="regression", max_drop=options.max_drop,
                message=f"{check.metric.title}: current trial {cur_trial.name!r} ended {cur_trial.status}"
                + (f": {cur_trial.error}" if cur_trial.error else ""),
            ))
            continue
        try:
            report.verdicts.append(check.evaluate(cur_side, base_side))
        except MetricUnavailable as exc:
            report.errors.append(f"{metric_id}: {exc}")
    return report

"""The gate: pick the runs, refuse incomparable runs, evaluate every metric check, collect the verdicts.

    >>> report = run_gate(Results.load("current.json"), Results.load("baseline.json"), GateOptions())
    >>> report.outcome          # "pass" | "regression" | "inconclusive" | "not_comparable" | "unusable"

Every verdict is collected before anything is reported (pytest-benchmark's compare does the same), so
one run shows every regressed metric at once. Exit codes belong to the CLI; this returns data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

from perfscope.check.baseline import BaselineHistory
from perfscope.check.compat import Difference, find_differences
from perfscope.check.decision import MetricCheck, Verdict
from perfscope.check.metrics import METRICS, Metric, MetricUnavailable, Side
from perfscope.check.sessions import StoredSession
from perfscope.check.structure import StructureDiff, StructureGate, diff_sides, runs_consensus
from perfscope.results import Results, Trial
from perfscope.results.messages import Message, msg
from perfscope.results.roles import recommended_configuration
from perfscope.wording import words

Outcome = Literal["pass", "regression", "inconclusive", "not_comparable", "unusable"]

RECOMMENDED = "recommended"
"""--trial value meaning "each file's sweep-recommended trial" (their names may differ)."""


class ErrorCode(str, Enum):
    """Why nothing was compared, for code and tests to act on; the words are GateError.message's."""

    NO_RECOMMENDATION = "no-recommendation"
    """--trial recommended, and a file has no sweep-recommended configuration."""
    NO_RUN = "no-run"
    """A file has no run of the gated configuration."""
    BASELINE_FAILED = "baseline-failed"
    """Every baseline run of the configuration failed: record a new baseline."""
    STRUCTURE_NOT_COMPARED = "structure-not-compared"
    """--fail-on-structure, and a side has no fingerprint."""
    NO_EVIDENCE = "no-evidence"
    """The baseline has no run usable as evidence (all excluded or failed)."""
    METRIC_UNAVAILABLE = "metric-unavailable"
    """A gated metric cannot be computed from the files (e.g. MFU without a FLOP count)."""


@dataclass(frozen=True, kw_only=True)
class GateError:
    """Unusable input: a code to branch on and the message a user reads (worded by perfscope.check.render)."""

    code: ErrorCode
    message: Message


@dataclass(frozen=True, kw_only=True)
class GateOptions:
    metrics: tuple[str, ...] = ("mfu",)
    """Metric ids to gate (keys of perfscope.check.metrics.METRICS); one verdict each."""
    max_drop: float = 0.05
    """Tolerated worsening as a fraction: a fall for MFU and samples/s, a rise for step time."""
    trial: str = "baseline"
    """Configuration compared in both files (its runs), or "recommended" for each file's sweep recommendation."""
    allow_mismatch: bool = False
    """Compare runs whose device, dtype, peak or workload differ (the differences become warnings)."""
    fail_on_structure: tuple[StructureGate, ...] = ()
    """Structural changes that fail the job (perfscope.check.structure); every change is named regardless."""
    between_session: float | None = None
    """The user's stated relative sd of day-to-day offsets on one host; None: estimated from the baseline's
    stored sessions, or a conservative default where they are too few (perfscope.check.sessions)."""
    between_host: float | None = None
    """The user's stated relative sd of offsets between hosts of one kind; None: estimated or the default."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics:
            raise ValueError(f"unknown metrics {unknown}; choose from {sorted(METRICS)}")
        if not 0 <= self.max_drop < 1:
            raise ValueError(f"max_drop must be in [0, 1), got {self.max_drop}")
        for name in ("between_session", "between_host"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")


@dataclass(kw_only=True)
class GateReport:
    """Everything the gate found, ready for the table, Markdown and JUnit renderers."""

    options: GateOptions
    current_source: str = ""
    baseline_source: str = ""
    current_trial: str | None = None
    baseline_trial: str | None = None
    errors: list[GateError] = field(default_factory=list)  # unusable input: nothing was compared
    differences: list[Difference] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[Message] = field(default_factory=list)  # how the comparison was made, shown with the warnings
    failed_current: Trial | None = None  # the current configuration's run failed outright
    structure: StructureDiff | None = None  # the fingerprints' diff (None: no run on a side to take one from)

    def error(self, code: ErrorCode, message: Message) -> None:
        self.errors.append(GateError(code=code, message=message))

    @property
    def blocking_differences(self) -> list[Difference]:
        return [d for d in self.differences if d.blocking]

    @property
    def warnings(self) -> list[str]:
        """In words: the differences that did not stop the comparison (always-soft ones, or all with
        --allow-mismatch), the notes and the verdicts' warnings."""
        said = [words(m) for m in self.notes] + [words(w) for v in self.verdicts for w in v.warnings]
        if self.blocking_differences and not self.options.allow_mismatch:
            return [words(d.message) for d in self.differences if not d.blocking] + said
        return [words(d.message) for d in self.differences] + said

    @property
    def structure_failed(self) -> bool:
        """A --fail-on-structure gate failed, or could not be checked (no fingerprint on a side)."""
        if not self.options.fail_on_structure or self.structure is None:
            return False
        return bool(self.structure.failed)

    @property
    def outcome(self) -> Outcome:
        refused = self.blocking_differences if not self.options.allow_mismatch else []
        if self.structure_failed and not refused:
            return "regression"  # exact: holds even when the timing had no evidence (every run contended)
        if self.errors or any(not d.host for d in refused):
            return "unusable"
        if refused:
            return "not_comparable"  # another machine or software stack: the history cannot judge it
        statuses = {v.status for v in self.verdicts}
        if "regression" in statuses or self.structure_failed:
            return "regression"
        if "inconclusive" in statuses or not self.verdicts:
            return "inconclusive"
        return "pass"


def _pick_runs(results: Results, name: str, role: str) -> tuple[str | None, list[Trial], GateError | None]:
    """(configuration, its runs, error) from one file: the runs the gate compares."""
    if name == RECOMMENDED:
        configuration = recommended_configuration(results)
        if configuration is None:
            return None, [], GateError(code=ErrorCode.NO_RECOMMENDATION,
                                       message=msg("gate_no_recommendation", role=role))
    else:
        trial = results.trial(name)
        configuration = trial.configuration if trial is not None else name
    runs = [t for t in results.trials if t.configuration == configuration]
    if not runs:
        known = list(dict.fromkeys(t.configuration for t in results.trials))
        return configuration, [], GateError(code=ErrorCode.NO_RUN, message=msg(
            "gate_no_run", role=role, configuration=configuration, known=known))
    return configuration, runs, None


def _slower(verdict: Verdict) -> bool:
    """A regression, or a change past the tolerance that the noise could not confirm: both want a cause."""
    if verdict.status == "regression":
        return True
    if verdict.status != "inconclusive" or verdict.change is None:
        return False
    ratio = 1 + verdict.change
    return ratio < 1 - verdict.max_drop if verdict.metric.higher_is_better else ratio > 1 + verdict.max_drop


class PeakKind(str, Enum):
    """Where a file's MFU peak came from, read from its numbers: `Peak.source` is words for the reader."""

    USER = "user"  # --peak-tflops
    DATASHEET = "datasheet"
    MEASURED_CEILING = "measured-ceiling"  # this machine's matmul, measured: it varies run to run
    UNKNOWN = "unknown"


def peak_kind(results: Results) -> PeakKind | None:
    """The kind of ``results.peak`` (None: no peak), by the values perfscope.measure.mfu.choose_peak chose from."""
    peak, env = results.peak, results.environment
    if peak is None:
        return None
    if peak.dtype == "user":
        return PeakKind.USER

    def chosen_from(table: dict[str, float]) -> bool:
        return peak.dtype in table and math.isclose(table[peak.dtype], peak.tflops, rel_tol=1e-9)

    if chosen_from(env.datasheet_peaks_tflops):
        return PeakKind.DATASHEET
    if chosen_from(env.measured_ceiling_tflops):
        return PeakKind.MEASURED_CEILING
    return PeakKind.UNKNOWN


def _side(files: list[Results], options: GateOptions, role: str, source: str, report: GateReport) -> Side | None:
    runs: list[Trial] = []
    names: list[str] = []
    for results in files:
        configuration, found, error = _pick_runs(results, options.trial, role)
        if error:
            report.errors.append(error)
            continue
        names.append(configuration or "")
        failed = [t for t in found if not t.ok]
        if role == "baseline" and failed and not any(t.ok for t in found):
            first = failed[0]
            report.error(ErrorCode.BASELINE_FAILED, msg("gate_baseline_failed", name=first.name, status=first.status,
                                                        error=first.error))
            continue
        if role == "current" and failed and not any(t.ok for t in found):
            report.failed_current = failed[0]
        runs += [t for t in found if t.evidence]
        excluded = [t for t in found if t.ok and t.excluded]
        if excluded:
            report.notes.append(msg("runs_not_used", role=role, runs=len(excluded), why=[excluded[0].excluded]))
    if not files or report.errors:
        return None
    if role == "baseline":
        report.baseline_trial = names[0] if names else None
    else:
        report.current_trial = names[0] if names else None
    return Side(results=files[0], runs=runs, source=source, files=files)


def _stored(sessions: list[Side], metric: Metric) -> list[StoredSession]:
    """The metric's log values per stored session, with the host each ran on."""
    return [StoredSession(values=[math.log(v) for v in metric.per_run(s) if v > 0 and math.isfinite(v)],
                          host=s.results.environment.hostname or "") for s in sessions]


def run_gate(
    current: Results | list[Results],
    baseline: Results | BaselineHistory,
    options: GateOptions,
    *,
    current_source: str = "",
    baseline_source: str = "",
) -> GateReport:
    """Compare the gated configuration's runs in ``current`` (one or more files) with the baseline's runs.

    A plain Results baseline is a history of one session: no regression is called on it without
    ``options.between_session`` (perfscope.check.sessions says why)."""
    current_files = current if isinstance(current, list) else [current]
    history = baseline if isinstance(baseline, BaselineHistory) else BaselineHistory(sessions=[baseline], schema=1)
    baseline = history.latest
    report = GateReport(options=options, current_source=current_source, baseline_source=baseline_source)
    base_side = _side(list(history.sessions), options, "baseline", baseline_source, report)
    cur_side = _side(current_files, options, "current", current_source, report)
    if base_side is None or cur_side is None:
        return report
    if report.failed_current is None or cur_side.runs:
        # Structure first: it is counted, so contended runs (no timing evidence) still give it exactly.
        base, cur = (runs_consensus(t for r in files for t in _pick_runs(r, options.trial, role)[1])
                     for files, role in ((history.sessions, "baseline"), (current_files, "current")))
        report.structure = diff_sides(base, cur, options.fail_on_structure)
        if options.fail_on_structure and not report.structure.compared:
            report.error(ErrorCode.STRUCTURE_NOT_COMPARED,
                         msg("gate_structure_not_compared", notes=[n.message for n in report.structure.notes]))
    if not base_side.runs:
        report.error(ErrorCode.NO_EVIDENCE, msg("gate_no_evidence"))
        return report
    same_device = current_files[0].environment.device_name == baseline.environment.device_name
    if same_device and peak_kind(current_files[0]) is peak_kind(baseline) is PeakKind.MEASURED_CEILING:
        # A measured ceiling is a noisy reading of the same machine, not a property of the run: judge MFU
        # against the baseline's, so MFU moves exactly with throughput (what a datasheet peak guarantees).
        cur_side = Side(results=cur_side.results, runs=cur_side.runs, source=cur_side.source, peak=baseline.peak,
                        files=cur_side.files)
        report.notes.append(msg("shared_measured_ceiling"))
    base_side = Side(results=baseline, runs=base_side.runs, source=base_side.source, peak=baseline.peak,
                     files=base_side.files)
    sessions = [Side(results=s, runs=[t for t in _pick_runs(s, options.trial, "baseline")[1] if t.evidence],
                     peak=base_side.mfu_peak, files=[s]) for s in history.sessions]  # one per stored session
    hosts = sorted({s.environment.hostname for s in history.sessions if s.environment.hostname})
    report.notes.append(msg("baseline_sessions", runs=[len(s.runs) for s in sessions], hosts=hosts))
    if cur_side.runs:
        report.differences = []
        for session in sessions:  # every stored session: a history may span hosts, never hardware or software
            found = find_differences(cur_side, session if session.runs else base_side, metric_ids=options.metrics)
            report.differences += [d for d in found if d not in report.differences]  # a value, not its words
        for other in current_files[1:]:
            # The gated configuration's runs of each further file, not its first run of any configuration:
            # with --trial recommended the first run is usually the baseline, whose dtype or batch differs
            # from the recommendation's and would refuse files that agree. No such run: compare the file only.
            _, found, _ = _pick_runs(other, options.trial, "current")
            extra = Side(results=other, runs=[t for t in found if t.evidence] or cur_side.runs)
            report.differences += [d for d in find_differences(extra, cur_side, metric_ids=options.metrics)
                                   if d not in report.differences]
    if report.blocking_differences and not options.allow_mismatch:
        return report

    for metric_id in options.metrics:
        check = MetricCheck(metric=METRICS[metric_id], max_drop=options.max_drop)
        if report.failed_current is not None and not cur_side.runs:
            # The code under test broke the run (OOM, crash, non-finite loss): that is a regression, not noise.
            failed = report.failed_current
            report.verdicts.append(Verdict(
                metric=check.metric, status="regression", max_drop=options.max_drop,
                message=msg("verdict_run_failed", title=check.metric.title, role="current", name=failed.name,
                            status=failed.status, error=failed.error),
            ))
            continue
        try:
            verdict = check.evaluate(cur_side, base_side, sessions=_stored(sessions, check.metric),
                                     current_host=cur_side.results.environment.hostname or "",
                                     between_session=options.between_session, between_host=options.between_host)
        except MetricUnavailable as exc:
            report.error(ErrorCode.METRIC_UNAVAILABLE, msg("gate_metric_unavailable", metric=metric_id, error=exc.why))
            continue
        if report.structure is not None and _slower(verdict):
            # A timing verdict can only say "slower"; the fingerprint diff says why, or that nothing counted changed.
            verdict = replace(verdict, message=msg("verdict_with_structure", verdict=verdict.message,
                                                   structure=report.structure.summary()))
        report.verdicts.append(verdict)
    return report

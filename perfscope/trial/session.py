"""A measurement session: runs trials through one runner, records each at once, resumes, reports progress.

Design notes: docs/measurement.md."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, TextIO

from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.measure.ranks import apply_job
from perfscope.results import Results, ResultsError, Trial, TrialMetrics, from_jsonable
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.trial.launch import Launch
from perfscope.trial.runner import Outcome, TrialRunner
from perfscope.trial.spec import ChildSpec, TrialSpec
from perfscope.wording import words

CONTENTION_RETRIES = 2
"""Extra runs of a configuration whose run was contended, before perfscope gives up and says so."""
PERSISTENT_AFTER = 3
"""Measurements the load may spoil through every retry before the session stops measuring again at once: the
machine is busy, and each retry then only triples the cost of a run that ends excluded anyway (a sweep on a busy
machine once took 70 runs). Later contended runs are excluded at once; the sweep's own repetition still applies."""
IN_FLIGHT = "in flight on its lane"
"""The error of a parallel run's placeholder until its lane returns (what stays of it when the sweep is interrupted)."""
LOAD_WARNINGS = frozenset({"persistent_load", "persistent_load_v2"})
"""The codes of the session's one persistent-load warning: its own, and one an older perfscope wrote as prose."""


class LaneRunner(Protocol):
    """Where a parallel sweep's run goes (perfscope.lanes): a lane's index and its executor's way to run a trial."""

    index: int

    def run(self, spec: ChildSpec, work_dir: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> Outcome: ...


@dataclass
class Progress:
    """One line per run on stderr: which run, how many so far, time spent (and budget when set)."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    budget_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    count: int = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _clock(self) -> str:
        spent = f"{self.elapsed():.0f}s"
        return f"{spent}/{self.budget_s:.0f}s" if self.budget_s else spent

    def begin(self, name: str) -> None:
        self.count += 1
        print(f"[{self.count} | {self._clock()}] {name}: running ...", file=self.stream, flush=True)

    def end(self, trial: Trial) -> None:
        if trial.ok:
            m = trial.metrics
            assert m is not None
            rate = f"{m.samples_per_s:.1f} samples/s" if m.samples_per_s is not None else "samples/s n/a"
            mfu = f", MFU {m.mfu:.1%}" if m.mfu is not None else ""
            line = f"ok  {rate}{mfu} ({m.steps} steps in {m.wall_s:.2f} s)"
            if trial.excluded:
                line += f"  [not used: {words(trial.excluded)}]"
        else:
            first = (trial.error or "").splitlines()[0] if trial.error else ""
            line = f"{trial.status.upper()}  {first}"
        print(f"    {trial.name}: {line}  ({trial.wall_time_s or 0:.1f}s)", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        print(f"    {text}", file=self.stream, flush=True)


class Session:
    def __init__(self, results: Results, *, out_dir: Path, workload_path: Path, timeout_s: float, resume: bool = False,
                 progress: Progress | None = None, runner: TrialRunner | None = None,
                 contention_retries: int = CONTENTION_RETRIES, launch: Launch | None = None) -> None:
        self.results = results
        self.out_dir = out_dir
        self.workload_path = workload_path
        self.timeout_s = timeout_s
        self.resume = resume
        self.progress = progress or Progress()
        self.runner = runner or TrialRunner(out_dir / "trials")
        self.results_path = out_dir / "results.json"
        # Resuming replays the run order: the k-th run of a configuration is kept from the previous results when
        # that run finished with the same config; runs the replay does not reach are dropped, not left stale.
        self._previous = {t.name: t for t in results.trials} if resume else {}
        results.trials = []
        # The replay earns its load warning again from the runs it keeps; the previous one (in any wording an
        # earlier perfscope wrote) would stand beside it.
        results.warnings = [w for w in results.warnings if w.code not in LOAD_WARNINGS]
        self._sequence = 0
        self.contention_retries = contention_retries
        self._spoiled: dict[str, int] = {}
        """Configuration -> how many of its measurements stayed contended through every retry."""
        self._load_warning: Message | None = None
        """This session's one persistent-load warning as it stands in results.warnings."""
        self.launch = launch
        """torchrun's arguments for the distributed runs (a config of more than one rank); None: one process."""
        self.may_retry: Callable[[], bool] = lambda: True
        """Whether a contended run may be measured again now (the sweep's budget sets it: a retry that would overrun
        the announced time is not made, and the run stays excluded)."""
        self._lock = threading.RLock()
        """Held while a run is named, numbered and recorded: a parallel sweep's lanes measure from threads."""

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.close()

    def save(self) -> None:
        with self._lock:
            self.results.save(self.results_path)

    def _next_name(self, configuration: str) -> tuple[str, int]:
        repeat = 1 + sum(1 for t in self.results.trials if t.configuration == configuration)
        return (configuration if repeat == 1 else f"{configuration}-r{repeat}"), repeat

    def measure(self, configuration: str, config: TrialConfig, knobs: list[str] | None = None, *,
                lane: LaneRunner | None = None) -> Trial:
        """A new run of ``configuration``; re-measured while its window is contended (see the module docstring).
        ``lane``: run it there (a parallel sweep, perfscope.lanes) instead of through this session's runner."""
        given_up = sum(self._spoiled.values()) >= PERSISTENT_AFTER
        trial = self._measure_once(configuration, config, knobs, lane)
        for _ in range(0 if given_up else self.contention_retries):
            if not (trial.ok and trial.metrics and trial.metrics.contention):
                return trial
            why = list(dict.fromkeys(trial.metrics.contention))
            if not self.may_retry():
                trial.excluded = msg("contended", why=why, budget=True)
                self.progress.note(f"{trial.name} was measured under load ({words(trial.excluded)})")
                return trial
            trial.excluded = msg("contended", why=why)
            self.progress.note(f"{trial.name} was measured under load ({words(trial.excluded)}): measuring again")
            self.save()
            trial = self._measure_once(configuration, config, knobs, lane)
        if trial.ok and trial.metrics and trial.metrics.contention:
            why = list(dict.fromkeys(trial.metrics.contention))
            if given_up:
                trial.excluded = msg("contended", why=why, gave_up_after=PERSISTENT_AFTER)
            elif self.contention_retries:
                trial.excluded = msg("contended", why=why, runs=self.contention_retries + 1)
            else:
                trial.excluded = msg("contended", why=why)
            self._warn_persistent_load(configuration, why)
        return trial

    def _warn_persistent_load(self, configuration: str, why: list[Message]) -> None:
        """One warning for every measurement the load spoiled, rewritten in place as they come: on a busy machine a
        sweep meets it dozens of times, and one line per time buried the report's summary under them."""
        with self._lock:
            self._spoiled[configuration] = self._spoiled.get(configuration, 0) + 1
            gave_up = sum(self._spoiled.values()) > PERSISTENT_AFTER and self.contention_retries
            warning = msg("persistent_load", runs=self.contention_retries + 1, spoiled=dict(self._spoiled), last=why,
                          gave_up_after=PERSISTENT_AFTER if gave_up else None)
            warnings = self.results.warnings
            if self._load_warning is not None and self._load_warning in warnings:
                warnings[warnings.index(self._load_warning)] = warning
            else:
                warnings.append(warning)
            self._load_warning = warning
            self.save()

    def _measure_once(self, configuration: str, config: TrialConfig, knobs: list[str] | None,
                      lane: LaneRunner | None = None) -> Trial:
        with self._lock:  # named and numbered at once: two lanes never take the same name or place in the order
            name, repeat = self._next_name(configuration)
            self._sequence += 1
            sequence = self._sequence
            previous = self._previous.get(name)
            if previous is not None and previous.config == config and previous.status != "skipped" and lane is None:
                self.progress.note(f"{name}: kept from the previous run ({previous.status})")
                previous.sequence = self._sequence
                self.results.upsert(previous)
                return previous
            if lane is not None:  # the name is taken now: a placeholder holds it while the run is in flight on its lane
                self.results.upsert(Trial(name=name, configuration=configuration, repeat=repeat, sequence=sequence,
                                          config=config, status="skipped", knobs=list(knobs or []), error=IN_FLIGHT,
                                          lane=lane.index))
            self.progress.begin(name if lane is None else f"{name} [lane {lane.index}]")
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if config.distributed and self.launch is None:
            raise ValueError(f"{name}: a configuration of {config.world_size} ranks needs a launch (Session(launch=...))")
        spec = TrialSpec(workload_path=str(self.workload_path), config=config,
                         artifacts_dir=str(self.out_dir / "trials" / name),
                         launch=self.launch if config.distributed else None)
        runner = lane if lane is not None else self.runner
        outcome = runner.run(spec, self.out_dir / "trials" / name, timeout_s=self.timeout_s, env=config.env)
        metrics = None
        status, error = outcome.status, outcome.error
        if "metrics" in outcome.payload:
            try:
                metrics = from_jsonable(TrialMetrics, outcome.payload["metrics"], "metrics")
            except ResultsError as exc:  # a figure no measurement can produce: a bug to report, not a result to rank
                status, error = "error", (f"the run's measurements failed validation ({exc}); they are kept in "
                                          f"{self.out_dir / 'trials' / name / 'result.json'}")
        if metrics is not None:
            if metrics.distributed is not None:  # samples/s and MFU become the job's: the slowest rank sets the pace
                apply_job(metrics, metrics.distributed, peak=self.results.peak, env=self.results.environment)
            else:
                apply_utilization_ratios(metrics, self.results.peak, self.results.environment)
            if metrics.trace_path:  # relative to results.json, so the output folder can be moved
                metrics.trace_path = str(Path(metrics.trace_path).resolve().relative_to(self.out_dir.resolve()))
        trial = Trial(name=name, configuration=configuration, repeat=repeat, sequence=sequence, config=config,
                      status=status, knobs=list(knobs or []), error=error, metrics=metrics,  # type: ignore[arg-type]
                      wall_time_s=outcome.wall_time_s, started_at=started_at, lane=lane.index if lane is not None else None)
        with self._lock:
            self.results.upsert(trial)
            self.save()
            self.progress.end(trial)
        return trial

"""A measuring session: runs trials in isolation, records each one at once, resumes, reports progress.

    session = Session(results, out_dir=..., workload_path=..., timeout_s=600)
    trial = session.measure("baseline", config)           # ok / oom / error / crashed / timeout / nonfinite

The sweep and `analyze` both go through `measure`, so every trial — baseline, knob, micro-batch probe —
gets the same isolation, the same MFU denominator and the same bookkeeping. results.json is rewritten
atomically after every trial: an interrupted run loses at most the trial in flight.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from perfscope.measure.mfu import apply_utilization_ratios
from perfscope.results import Results, Trial, TrialMetrics, from_jsonable
from perfscope.trial.config import TrialConfig
from perfscope.trial.runner import run_isolated


@dataclass
class Progress:
    """One line per trial on stderr: which trial, how many so far, time spent (and budget when set)."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    budget_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    count: int = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _clock(self) -> str:
        spent = f"{self.elapsed():.0f}s"
        return f"{spent}/{self.budget_s:.0f}s" if self.budget_s else spent

    def begin(self, name: str, planned: int | None = None) -> None:
        self.count += 1
        of = f"/{planned}" if planned else ""
        print(f"[{self.count}{of} | {self._clock()}] {name}: running ...", file=self.stream, flush=True)

    def end(self, trial: Trial) -> None:
        if trial.ok:
            m = trial.metrics
            assert m is not None
            mfu = f", MFU {m.mfu:.1%}" if m.mfu is not None else ""
            line = f"ok  {m.step_time_s.median * 1e3:.1f} ms/step, {m.samples_per_s:.1f} samples/s{mfu}"
        else:
            first = (trial.error or "").splitlines()[0] if trial.error else ""
            line = f"{trial.status.upper()}  {first}"
        print(f"    {trial.name}: {line}  ({trial.wall_time_s or 0:.1f}s)", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        print(f"    {text}", file=self.stream, flush=True)


class Session:
    def __init__(
        self,
        results: Results,
        *,
        out_dir: Path,
        workload_path: Path,
        timeout_s: float,
        resume: bool = False,
        progress: Progress | None = None,
    ) -> None:
        self.results = results
        self.out_dir = out_dir
        self.workload_path = workload_path
        self.timeout_s = timeout_s
        self.resume = resume
        self.progress = progress or Progress()
        self.results_path = out_dir / "results.json"

    def save(self) -> None:
        self.results.save(self.results_path)

    def reusable(self, name: str, config: TrialConfig) -> Trial | None:
        """A finished trial of the same name and config from an earlier (interrupted) run, when resuming."""
        if not self.resume:
            return None
        previous = self.results.trial(name)
        if previous is not None and previous.config == config.to_dict() and previous.status != "skipped":
            return previous
        return None

    def measure(self, name: str, config: TrialConfig, knobs: list[str] | None = None, *, planned: int | None = None) -> Trial:
        previous = self.reusable(name, config)
        if previous is not None:
            self.progress.note(f"{name}: kept from the previous run ({previous.status})")
            return previous
        self.progress.begin(name, planned)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        spec = {
            "mode": "trial",
            "workload_path": str(self.workload_path),
            "config": config.to_dict(),
            "artifacts_dir": str(self.out_dir / "trials" / name),
        }
        outcome = run_isolated(spec, self.out_dir / "trials" / name, timeout_s=self.timeout_s, env=config.env)
        metrics = None
        if "metrics" in outcome.payload:
            metrics = from_jsonable(TrialMetrics, outcome.payload["metrics"])
            apply_utilization_ratios(metrics, self.results.peak, self.results.environment)
            if metrics.trace_path:  # relative to results.json, so the output folder can be moved
                metrics.trace_path = str(Path(metrics.trace_path).resolve().relative_to(self.out_dir.resolve()))
        trial = Trial(
            name=name,
            config=config.to_dict(),
            status=outcome.status,  # type: ignore[arg-type]
            knobs=list(knobs or []),
            error=outcome.error,
            metrics=metrics,
            wall_time_s=outcome.wall_time_s,
            started_at=started_at,
        )
        self.results.upsert(trial)
        self.save()
        self.progress.end(trial)
        return trial

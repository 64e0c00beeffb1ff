"""The end of every measurement: rules → results.json → reports, for `analyze` and the hooks alike.

Design notes: docs/internals.md."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from perfscope.report import write_report
from perfscope.results import Results
from perfscope.results.io import copy_file
from perfscope.rules import run_rules


def finish(results: Results, out_dir: Path, *, trace_source: Path | None = None, report: bool = True) -> Path:
    """Diagnose, save and render ``results`` into ``out_dir``; returns the results.json path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if trace_source is not None:
        _adopt_trace(results, out_dir, trace_source)
    if results.ok_trials():
        try:
            results.findings = run_rules(results)
        except Exception as exc:  # noqa: BLE001 - a rule bug must not lose the measurements
            warnings.warn(f"perfscope: the rules failed ({type(exc).__name__}: {exc}); results.json is saved without findings",
                          RuntimeWarning, stacklevel=2)
    path = results.save(out_dir / "results.json")
    if report:
        try:
            write_report(results, out_dir / "report.html", fmt="html")
            write_report(results, out_dir / "report.md", fmt="md")
        except Exception as exc:  # noqa: BLE001 - the page is derived; results.json is intact
            print(f"perfscope: warning: the report could not be written ({type(exc).__name__}: {exc}); "
                  f"results.json is intact — retry with `perfscope report {path}`", file=sys.stderr)
    return path


def _adopt_trace(results: Results, out_dir: Path, source: Path) -> None:
    """A trace written elsewhere during the run (the hooks' trace_dir) is copied into out_dir/trace/."""
    for trial in results.trials:
        if trial.metrics is None or trial.metrics.trace_path is None:
            continue
        if Path(trial.metrics.trace_path).resolve() != source.resolve():
            continue
        target = out_dir / "trace" / source.name
        if source.resolve() != target.resolve():
            if source.is_file():
                copy_file(source, target)
                if source.parent.resolve() == out_dir.resolve():
                    source.unlink()
            elif not target.is_file():
                continue  # gone (deleted by the user): keep the path the run recorded
        trial.metrics.trace_path = str(target.relative_to(out_dir))

"""Recording the baseline a CI gate compares against: the runs of one or more validated results files.

    perfscope baseline save run1/results.json run2/results.json     # -> perfscope-baseline.json
    perfscope baseline update run/results.json --to ci/baseline.json

The gate decides on run-to-run variance, so a baseline should hold several runs of the gated configuration:
from `perfscope analyze --repeat N` (N runs in one file) or from several analyze invocations (their runs
merged here; each file's runs keep their configuration, renamed so names stay unique). `save` refuses to
overwrite (a baseline silently replaced hides every regression since it was taken); `update` is the
explicit way to move it. Files that describe different machines or workloads are refused.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from perfscope.check.compat import find_differences
from perfscope.check.metrics import Side
from perfscope.errors import UserError
from perfscope.results import Results, ResultsError

DEFAULT_BASELINE = Path("perfscope-baseline.json")


@dataclass(frozen=True, kw_only=True)
class SavedBaseline:
    path: Path
    replaced: bool
    trials: list[str]  # successful runs the gate can compare
    warnings: list[str]


def validate_baseline(results: Results, source: str) -> tuple[list[str], list[str]]:
    """Runs usable as a baseline, and warnings; raises ResultsError when none is usable."""
    usable = [t.name for t in results.trials if t.evidence and t.metrics and t.metrics.steps > 0 and t.metrics.wall_s > 0]
    if not usable:
        raise ResultsError(f"{source}: no successful run with a timed window; not usable as a baseline")
    warnings = []
    if not any(t.configuration == "baseline" for t in results.trials if t.name in usable):
        warnings.append(f"no usable run of the configuration 'baseline' (usable: {', '.join(usable)}); pass --trial to check")
    return usable, warnings


def merge_runs(files: list[tuple[Results, str]]) -> Results:
    """One Results holding every file's runs, in order; refused when the files are not comparable."""
    merged, first_source = files[0]
    merged = dataclasses.replace(merged, trials=list(merged.trials))
    offset = max((t.sequence or 0 for t in merged.trials), default=0)
    for other, source in files[1:]:
        mine = Side(results=merged, runs=[t for t in merged.trials if t.ok] or merged.trials)
        theirs = Side(results=other, runs=[t for t in other.trials if t.ok] or other.trials)
        blocking = [d for d in find_differences(theirs, mine, metric_ids={"samples_per_s"}) if d.blocking]
        if blocking:
            raise UserError(f"{source} cannot join {first_source} in one baseline: " + "; ".join(map(str, blocking)))
        for trial in sorted(other.trials, key=lambda t: t.sequence or 0):
            repeat = 1 + sum(1 for t in merged.trials if t.configuration == trial.configuration)
            name = trial.configuration if repeat == 1 else f"{trial.configuration}-r{repeat}"
            merged.trials.append(dataclasses.replace(trial, name=name, repeat=repeat, sequence=offset + (trial.sequence or 0)))
        offset = max((t.sequence or 0 for t in merged.trials), default=offset)
    merged.notes = [*merged.notes, f"baseline merged from {len(files)} results files: " + ", ".join(s for _, s in files)]
    return merged


def save_baseline(results_paths: list[str | os.PathLike[str]] | str | os.PathLike[str],
                  to: str | os.PathLike[str] = DEFAULT_BASELINE, *, overwrite: bool = False) -> SavedBaseline:
    paths = [Path(p) for p in (results_paths if isinstance(results_paths, list) else [results_paths])]
    dest = Path(to)
    if any(dest.exists() and dest.resolve() == p.resolve() for p in paths):
        raise UserError(f"{dest} is one of the results files; choose another --to")
    existed = dest.exists()
    if existed and not overwrite:
        raise UserError(f"{dest} exists; use `perfscope baseline update` to replace it")
    loaded = [(Results.load(p), str(p)) for p in paths]
    for results, source in loaded:
        validate_baseline(results, source)
    merged = merge_runs(loaded) if len(loaded) > 1 else loaded[0][0]
    usable, warnings = validate_baseline(merged, str(dest))
    if len(usable) < 3:
        warnings.append(f"{len(usable)} run(s) in the baseline: the gate needs at least 3 runs in all to know this "
                        "machine's run-to-run noise (use `perfscope analyze --repeat 5`, or save several results files)")
    if existed and not overwrite:  # re-checked after the (slow) loading
        raise UserError(f"{dest} exists; use `perfscope baseline update` to replace it")
    merged.save(dest)
    return SavedBaseline(path=dest, replaced=existed, trials=usable, warnings=warnings)

"""Recording the baseline a CI gate compares against: a validated copy of a results.json.

    perfscope baseline save perfscope-out/results.json            # -> perfscope-baseline.json
    perfscope baseline update perfscope-out/results.json --to ci/baseline.json

`save` refuses to overwrite (a baseline silently replaced hides every regression since it was taken);
`update` is the explicit way to move it. The file is validated first (schema, at least one successful
trial with per-step samples) and copied byte for byte, so fields this version does not know survive.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfscope.errors import UserError
from perfscope.results import Results, ResultsError

DEFAULT_BASELINE = Path("perfscope-baseline.json")
MIN_STEPS = 5  # below this the gate can only answer "inconclusive" (perfscope.check.decision)


@dataclass(frozen=True, kw_only=True)
class SavedBaseline:
    path: Path
    replaced: bool
    trials: list[str]  # successful trials the gate can compare
    warnings: list[str]


def validate_baseline(results: Results, source: str) -> tuple[list[str], list[str]]:
    """Trials usable as a baseline, and warnings; raises ResultsError when none is usable."""
    usable = [t.name for t in results.ok_trials() if t.metrics and len(t.metrics.step_times_s) >= MIN_STEPS]
    if not usable:
        raise ResultsError(
            f"{source}: no successful trial with at least {MIN_STEPS} measured steps; not usable as a baseline"
        )
    warnings = []
    if "baseline" not in usable:
        warnings.append(f"no usable trial named 'baseline' (usable: {', '.join(usable)}); pass --trial to check")
    return usable, warnings


def save_baseline(results_path: str | os.PathLike[str], to: str | os.PathLike[str] = DEFAULT_BASELINE, *,
                  overwrite: bool = False) -> SavedBaseline:
    src, dest = Path(results_path), Path(to)
    results = Results.load(src)
    usable, warnings = validate_baseline(results, str(src))
    if dest.exists() and dest.resolve() == src.resolve():
        raise UserError(f"{src} is already the baseline file")
    existed = dest.exists()
    if existed and not overwrite:
        raise UserError(f"{dest} exists; use `perfscope baseline update` to replace it")
    data = src.read_bytes()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, dest)
        else:
            try:
                os.link(tmp, dest)  # atomic and never clobbers: fails if someone created dest meanwhile
            except FileExistsError:
                raise UserError(f"{dest} exists; use `perfscope baseline update` to replace it") from None
            except OSError:  # a filesystem without hard links: rename, the race window is ours to accept
                os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return SavedBaseline(path=dest, replaced=existed, trials=usable, warnings=warnings)

"""Thin adapters that put a perfscope.Profiler into frameworks that own the training loop, and where each fit's
results go (a second fit into one folder gets ``out/fit-2``: it never silently replaces the first's).

    from perfscope.hooks.integrations.lightning import PerfscopeCallback          # Lightning
    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback  # transformers.Trainer

Each module imports its framework when it is imported itself; perfscope never depends on them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfscope.hooks.profiler import Profiler

_FITS: Counter[str] = Counter()
"""Fits started in this process, by resolved output folder."""


@dataclass(frozen=True)
class FitFolder:
    root: Path
    """The folder the user named."""
    fit: int
    """1 for the first fit into ``root`` in this process, 2 for the second, ..."""
    rank: int
    world_size: int
    job: bool = False
    """The profiler gathers every rank at save(): one folder, rank 0 writes it."""

    @property
    def path(self) -> Path:
        folder = self.root if self.fit == 1 else self.root / f"fit-{self.fit}"
        return folder / f"rank{self.rank}" if self.world_size > 1 and not self.job else folder

    @property
    def declared(self) -> dict[str, object]:
        """What the report shows about this fit's place (only when it is not the plain single fit)."""
        shown: dict[str, object] = {}
        if self.fit > 1:
            shown["fit"] = f"trainer fit #{self.fit} in this process (fit #1's results are in {self.root})"
        if self.world_size > 1 and not self.job:
            shown["rank"] = f"{self.rank} of {self.world_size} processes (each rank writes its own results)"
        return shown


class FitCallback:
    """What both callbacks share: a Profiler for each fit, the folder the fit saves to, and its results.json."""

    def __init__(self, out_dir: str | os.PathLike[str] = "perfscope-run", **profiler_kwargs: Any) -> None:
        self.out_dir = Path(out_dir)
        self.profiler_kwargs = profiler_kwargs
        self.profiler: Profiler | None = None
        self.folder: FitFolder | None = None
        self.saved: Path | None = None
        """results.json of the last fit (None before one ends, or when nothing could be saved)."""

    def _start(self, model: Any, optimizer: Any, defaults: dict[str, Any], *, rank: int, world_size: int) -> Profiler:
        """The fit's Profiler (``profiler_kwargs`` over ``defaults``) and its folder, one more fit into ``out_dir``
        in this process (a job whose profiler found the process group: one folder, rank 0 writes every rank's)."""
        self.profiler = prof = Profiler(model, optimizer=optimizer, **{**defaults, **self.profiler_kwargs})
        key = str(self.out_dir.resolve())
        _FITS[key] += 1
        self.folder = FitFolder(root=self.out_dir, fit=_FITS[key], rank=rank, world_size=max(1, world_size),
                                job=prof.rank_place is not None)
        return prof

    def _save(self) -> None:
        """Save the fit's results and say where, in one line on stderr (rank 0 only): a callback's user never calls
        save() and must learn where they went."""
        prof, folder, self.profiler = self.profiler, self.folder, None
        if prof is None or folder is None:
            return
        self.saved = prof.save(folder.path)
        if self.saved is None or folder.rank != 0:
            return
        where = self.saved.parent if folder.world_size == 1 or folder.job else self.saved.parent.parent / "rank*"
        extra = f" (fit #{folder.fit} in this process; fit #1's results are kept in {folder.root})" if folder.fit > 1 else ""
        print(f"perfscope: results and report in {where}{extra}", file=sys.stderr)

"""Thin adapters that put a perfscope.Profiler into frameworks that own the training loop, and where each fit's
results go (a second fit into one folder gets ``out/fit-2``: it never silently replaces the first's).

    from perfscope.hooks.integrations.lightning import PerfscopeCallback          # Lightning
    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback  # transformers.Trainer

Each module imports its framework when it is imported itself; perfscope never depends on them.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

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


def claim_fit_folder(root: str | Path, *, rank: int, world_size: int, job: bool = False) -> FitFolder:
    """Register one more fit into ``root`` in this process and return where its results go (``job``: the
    profiler found the process group, so rank 0 writes every rank's results in one file)."""
    root = Path(root)
    key = str(root.resolve())
    _FITS[key] += 1
    return FitFolder(root=root, fit=_FITS[key], rank=rank, world_size=max(1, world_size), job=job)


def announce(folder: FitFolder, saved: Path | None) -> None:
    """One line on stderr (rank 0 only): a callback's user never calls save() and must learn where it went."""
    if saved is None or folder.rank != 0:
        return
    where = saved.parent if folder.world_size == 1 or folder.job else saved.parent.parent / "rank*"
    extra = f" (fit #{folder.fit} in this process; fit #1's results are kept in {folder.root})" if folder.fit > 1 else ""
    print(f"perfscope: results and report in {where}{extra}", file=sys.stderr)

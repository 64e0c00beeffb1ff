"""On a CUDA out-of-memory, the allocator's snapshot: a file pytorch.org/memory_viz opens, and what held the memory.

Design notes: docs/measurement.md."""

from __future__ import annotations

import contextlib
import io
import logging
import pickle
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfscope.measure.lazy_msg import msg, words

if TYPE_CHECKING:
    from perfscope.results.messages import Message

LIVE = ("active_allocated", "active_awaiting_free")
LOG = logging.getLogger("perfscope")


@dataclass
class SnapshotSummary:
    """What held the memory in one snapshot."""

    reserved_bytes: int
    """Every segment the caching allocator holds (cudaMalloc'd)."""
    live_bytes: int
    """Blocks in use by tensors (or awaiting a free on another stream)."""
    live_blocks: int
    sites: list[tuple[str, int]] = field(default_factory=list)
    """Live bytes by the innermost Python frame outside torch that allocated them, most first (history on)."""
    requested_bytes: int | None = None
    """The allocation that failed (the history's "oom" entry), when recorded."""
    path: str | None = None

    def message(self) -> Message:
        """What held the memory, as a message (its words: perfscope.wording's "oom_held")."""
        return msg("oom_held", reserved=self.reserved_bytes, live=self.live_bytes, blocks=self.live_blocks,
                   requested=self.requested_bytes, sites=[list(site) for site in self.sites[:3]], snapshot=self.path)

    def text(self) -> str:
        """The message's words: the log's warning, a trial's error line."""
        return words(self.message())


def summarize(snapshot: dict[str, Any], *, path: str | None = None) -> SnapshotSummary:
    """The summary of a torch.cuda.memory._snapshot() dictionary (its documented Segment / Block / Frame form)."""
    reserved = live = blocks = 0
    sites: Counter[str] = Counter()
    for segment in snapshot.get("segments", []):
        reserved += int(segment["total_size"])
        for block in segment.get("blocks", []):
            if block.get("state") in LIVE:
                live += int(block["size"])
                blocks += 1
                if site := allocation_site(block.get("frames") or []):
                    sites[site] += int(block["size"])
    ooms = [e for trace in snapshot.get("device_traces", []) for e in trace if e.get("action") == "oom"]
    return SnapshotSummary(reserved_bytes=reserved, live_bytes=live, live_blocks=blocks, sites=sites.most_common(),
                           requested_bytes=int(ooms[-1]["size"]) if ooms else None, path=path)


def allocation_site(frames: list[dict[str, Any]]) -> str | None:
    """The innermost Python frame outside torch (frames come innermost first; C++ frames have no .py file)."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if filename.endswith(".py") and "/torch/" not in filename:
            return f"{Path(filename).name}:{frame.get('line')} {frame.get('name')}"
    return None


class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a memory snapshot holds plain data, not {module}.{name}")


def load_snapshot(path: Path) -> dict[str, Any]:
    """A snapshot pickle as torch wrote it; ValueError naming the file for anything else."""
    try:
        data = _PlainData(io.BytesIO(Path(path).read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: not a torch memory snapshot ({exc})") from exc
    if not isinstance(data, dict) or "segments" not in data:
        raise ValueError(f"{path}: not a torch memory snapshot (no 'segments')")
    return data


class OomSnapshot:
    """Attach the out-of-memory observer; on an OOM, dump the snapshot into ``out_dir`` (None: a perfscope-oom-*
    temporary folder made then), summarize it, log it as one warning and add it to ``notes`` (a "cuda_oom" message).

    ``memory`` (torch.cuda.memory) and ``attach`` (torch._C._cuda_attach_out_of_memory_observer) are the seam a
    test replaces; nothing here raises into the job.
    """

    def __init__(self, out_dir: Path | None, *, rank: int = 0, history: bool = False, max_entries: int = 100_000,
                 notes: list[Message] | None = None, memory: Any = None,
                 attach: Callable[[Callable[..., None]], None] | None = None) -> None:
        self.out_dir, self.rank, self.notes = out_dir, rank, notes
        self.history, self.max_entries = history, max_entries
        self._memory, self._attach = memory, attach
        self.summary: SnapshotSummary | None = None
        self.unavailable: Message | None = None
        self.started = False

    def start(self) -> bool:
        """Attach (and record the history when asked); False with `unavailable` set where it cannot."""
        try:
            import torch

            memory = self._memory if self._memory is not None else torch.cuda.memory
            attach = self._attach if self._attach is not None else getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach is None or (self._memory is None and not torch.cuda.is_available()):
                self.unavailable = msg("oom_snapshot_no_cuda")
                return False
            if self.history:
                memory._record_memory_history(max_entries=self.max_entries)
            attach(self.observe)
            self._memory, self.started = memory, True
            return True
        except Exception as exc:  # noqa: BLE001 - the snapshot is a diagnostic, never the job's problem
            self.unavailable = msg("oom_snapshot_unavailable", error=f"{type(exc).__name__}: {exc}")
            return False

    def observe(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """The allocator's OOM observer: the snapshot, then its summary (the first OOM only: the state that failed)."""
        if self.summary is not None or not self.started:
            return
        try:
            snapshot = self._memory._snapshot()
            folder = Path(self.out_dir) if self.out_dir is not None else Path(tempfile.mkdtemp(prefix="perfscope-oom-"))
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"oom-snapshot-rank{self.rank}.pickle"
            path.write_bytes(pickle.dumps(snapshot))
            self.summary = summarize(snapshot, path=str(path))
            if self.summary.requested_bytes is None:
                self.summary.requested_bytes = int(alloc)
            note = msg("cuda_oom", device=device, held=self.summary.message())
            LOG.warning("perfscope: %s", words(note))
            if self.notes is not None:
                self.notes.append(note)
        except Exception as exc:  # noqa: BLE001 - an OOM handler that fails must not replace the OOM
            self.unavailable = msg("oom_snapshot_failed", error=f"{type(exc).__name__}: {exc}")

    def stop(self) -> None:
        """Stop the history; the observer stays attached (torch has no detach) but does nothing from here."""
        started, self.started = self.started, False
        if started and self.history:
            with contextlib.suppress(Exception):
                self._memory._record_memory_history(enabled=None)


def on_oom_snapshot(device: Any, out_dir: Path | None, notes: list[Message]) -> OomSnapshot | None:
    """The hooks' observer on a CUDA device (history off: nothing costs until an OOM); None elsewhere."""
    if getattr(device, "type", device) != "cuda":
        return None
    import os

    oom = OomSnapshot(out_dir, rank=int(os.environ.get("RANK", "0") or 0), notes=notes)
    return oom if oom.start() else None

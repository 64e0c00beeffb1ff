"""A trace the user brings: which files are rank traces, whether each is a Kineto trace, and what its metadata says.

Design notes: docs/trace.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.errors import UserError
from perfscope.trace.events import Trace, TraceBuilder, paused_gc
from perfscope.trace.intervals import Span
from perfscope.trace.reader import stream_trace, unusable_note
from perfscope.trace.window import find_steps
from perfscope.wording import words

TRACE_SUFFIXES = (".json", ".json.gz")
RESULTS_FILE = "results.json"
"""A perfscope output folder's results file: beside traces, never one."""
PERFSCOPE_TRACE_FOLDER = "trace"
"""Where perfscope writes a run's rank traces inside its output folder (perfscope.pipeline)."""


@dataclass(kw_only=True)
class RankTrace:
    """One rank's trace file, checked, with what its metadata says about the run."""

    path: Path
    rank: int
    rank_from: str
    """"distributedInfo" or "file order" (the trace did not say)."""
    world_size: int | None
    """distributedInfo.world_size; None when the trace does not say."""
    backend: str
    device_type: str
    """"cuda" when the trace has GPU kernels or device properties, else "cpu"."""
    device_name: str | None
    """The name of the GPU the rank's kernels ran on (deviceProperties); None when the trace does not say."""
    device_properties: dict[str, Any] = field(default_factory=dict)
    host_name: str = ""
    declared_rank: int | None = None
    """distributedInfo.rank; None when the trace does not say (then ``rank`` comes from the file order)."""
    steps: list[Span] = field(default_factory=list)
    """The ProfilerStep#N spans (else the steps the trace marks otherwise, perfscope.trace.window.find_steps), kept when the
    events are released."""
    steps_from: str = ""
    """How the steps were found ("" when they were not: the whole trace is the window)."""
    trace: Trace | None = None
    """The parsed events (perfscope.trace.events); None once released (a folder of large traces is analysed one
    rank at a time)."""

    @property
    def step_times_s(self) -> list[float]:
        """Each ProfilerStep#N span's duration, in step order (empty when the trace has none)."""
        return [(end - start) / 1e6 for start, end in self.steps]


def assign_ranks(path: Path, loaded: list[RankTrace]) -> list[RankTrace]:
    """Each file's rank: its distributedInfo.rank, else the lowest free rank in file-name order; two files of one
    rank are an error naming both. Sorted by rank."""
    claimed: dict[int, Path] = {}
    for r in loaded:
        if r.declared_rank is not None:
            if r.declared_rank in claimed:
                raise UserError(f"{path}: two traces of rank {r.declared_rank}: {claimed[r.declared_rank].name} and "
                                f"{r.path.name}")
            claimed[r.declared_rank] = r.path
    free = (n for n in range(len(loaded) + len(claimed)) if n not in claimed)
    for r in sorted(loaded, key=lambda r: r.path.name):
        r.rank, r.rank_from = (r.declared_rank, "distributedInfo") if r.declared_rank is not None else (next(free), "file order")
    return sorted(loaded, key=lambda r: r.rank)


def check_out_apart(path: Path, out: Path) -> None:
    """Refuse an output folder that holds the traces: writing results.json there would replace a perfscope run's own
    (a hooks run folder), and its reports would sit among the rank traces HTA loads."""
    folder = (path if path.is_dir() else path.parent).resolve()
    run = folder.parent if folder.name == PERFSCOPE_TRACE_FOLDER else folder  # a perfscope run folder: run/trace/
    if out.resolve() in {folder, run, folder / PERFSCOPE_TRACE_FOLDER}:
        raise UserError(f"--out {out}: the folder of the traces it reads; choose another output folder")


def trace_files(path: Path) -> list[Path]:
    """The trace files at ``path``, in file-name order; UserError when there are none."""
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"{path}: not a file or a folder")
    files = _listed(path)
    if not files and (path / PERFSCOPE_TRACE_FOLDER).is_dir():
        files = _listed(path / PERFSCOPE_TRACE_FOLDER)  # a perfscope output folder
    if not files:
        raise UserError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
    return files


def _listed(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != RESULTS_FILE)


def _streamed(path: Path) -> tuple[Trace, dict[str, Any]]:
    """The file's events, its steps found, and its other top-level keys."""
    builder = TraceBuilder()
    with paused_gc():
        data = stream_trace(Path(path), builder.add_batch)
        trace = builder.finish()
    find_steps(trace)
    return trace, data


def read_trace(path: Path) -> Trace:
    """Parse a Chrome trace (.json or .json.gz; an object with traceEvents, or a bare list), streamed."""
    return _streamed(path)[0]


def load_rank(file: Path) -> RankTrace:
    """One trace file streamed into its events and metadata, checked; its rank is decided by assign_ranks."""
    trace, data = _streamed(file)
    if not trace.complete_events:
        broken = unusable_note(trace.unusable)
        raise UserError(f"{file}: a trace with no complete (\"X\") events: nothing ran in it"
                        + (f" ({words(broken)}, nothing usable left)" if broken is not None else ""))
    info = data.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    props = [p for p in data.get("deviceProperties") or [] if isinstance(p, dict)]
    cuda = bool(trace.columns("device").by_cat("kernel").any() or props)
    device = _device_of(trace, props) if cuda else {}
    world = info.get("world_size")
    rank = info.get("rank")
    name = device.get("name")
    return RankTrace(
        path=file, rank=-1, rank_from="", world_size=world if _is_int(world) and world > 0 else None,
        backend=str(info.get("backend") or ""), device_type="cuda" if cuda else "cpu",
        device_name=str(name) if name else None, device_properties=device, host_name=str(data.get("host_name") or ""),
        declared_rank=rank if _is_int(rank) else None, steps=list(trace.steps), steps_from=trace.steps_from, trace=trace,
    )


def _device_of(trace: Trace, props: list[dict[str, Any]]) -> dict[str, Any]:
    """The deviceProperties entry of the GPU the rank's kernels ran on (the "device" arg most of them carry); the
    first entry when the kernels do not say (Kineto lists every GPU of the host, not only the rank's)."""
    if not props:
        return {}
    used = trace.kernel_devices
    if used:
        index = used.most_common(1)[0][0]
        match = next((p for p in props if p.get("id") == index), None)
        if match is not None:
            return match
    return props[0]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


__all__ = ["RankTrace", "assign_ranks", "check_out_apart", "load_rank", "read_trace", "trace_files"]

"""A trace the user brings: which files are rank traces, whether each is a Kineto trace, and what its metadata says.

    ranks = rank_traces(Path("traces/"))          # list[RankTrace], by rank; UserError (exit 2) on bad input
    ranks[0].rank, ranks[0].world_size, ranks[0].device_type, ranks[0].device_name

How a folder is read, as Holistic Trace Analysis reads one (hta.common.trace_file): every `*.json` / `*.json.gz`
file directly inside it is one rank's trace (`*.pt.trace.json[.gz]` included), its rank from the trace's
`distributedInfo.rank`. Where HTA defaults a missing rank to 0 and lets a later file replace an earlier one of the
same rank, here a file without a rank takes the lowest free rank in file-name order, and two files claiming one
rank are an error naming both: silently dropping a rank would hide the one that straggles. A perfscope output
folder works too: its `results.json` is not a trace and is skipped, and its traces live in `trace/`.

What makes a file a usable Kineto trace, each failure a one-line error naming the file: it is not empty, it
decompresses (a truncated gzip is named as such), it is JSON, it is an object with a `traceEvents` list (or a bare
list of events), it has complete ("X") events, and its steps can be found: ProfilerStep#N spans, or GPU kernels,
or a step count given by the user (--steps).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfscope.errors import UserError
from perfscope.trace.events import Trace, build_trace

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
    trace: Trace
    """The parsed events (perfscope.trace.events)."""

    @property
    def step_times_s(self) -> list[float]:
        """Each ProfilerStep#N span's duration, in step order (empty when the trace has none)."""
        return [(end - start) / 1e6 for start, end in self.trace.steps]


def rank_traces(path: Path, *, steps: int | None = None) -> list[RankTrace]:
    """The rank traces at ``path`` (a trace file or a folder of them), checked and sorted by rank."""
    files = _trace_files(path)
    parsed = [(file, _load(file, steps=steps)) for file in files]
    claimed: dict[int, Path] = {}
    for file, (data, _) in parsed:
        rank = _distributed(data).get("rank")
        if _is_int(rank):
            if rank in claimed:
                raise UserError(f"{path}: two traces of rank {rank}: {claimed[rank].name} and {file.name}")
            claimed[rank] = file
    free = (r for r in range(len(parsed) + len(claimed)) if r not in claimed)
    out = []
    for file, (data, trace) in parsed:
        info = _distributed(data)
        rank = info.get("rank")
        rank_from = "distributedInfo" if _is_int(rank) else "file order"
        out.append(_rank_trace(file, data, trace, rank=rank if _is_int(rank) else next(free), rank_from=rank_from))
    return sorted(out, key=lambda r: r.rank)


def check_out_apart(path: Path, out: Path) -> None:
    """Refuse an output folder that holds the traces: writing results.json there would replace a perfscope run's own
    (a hooks run folder), and its reports would sit among the rank traces HTA loads."""
    folder = (path if path.is_dir() else path.parent).resolve()
    run = folder.parent if folder.name == PERFSCOPE_TRACE_FOLDER else folder  # a perfscope run folder: run/trace/
    if out.resolve() in {folder, run, folder / PERFSCOPE_TRACE_FOLDER}:
        raise UserError(f"--out {out}: the folder of the traces it reads; choose another output folder")


def _trace_files(path: Path) -> list[Path]:
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


def _load(file: Path, *, steps: int | None) -> tuple[dict[str, Any], Trace]:
    """The trace's top-level object (metadata; a bare event list becomes {"traceEvents": [...]}) and its events."""
    try:
        if file.stat().st_size == 0:
            raise UserError(f"{file}: an empty file (0 bytes), not a Kineto trace")
        if file.name.endswith(".gz"):
            with gzip.open(file, "rt", encoding="utf-8") as fh:
                data = json.load(fh)
        else:
            with open(file, encoding="utf-8") as fh:
                data = json.load(fh)
    except EOFError:
        raise UserError(f"{file}: a truncated gzip file (it ends before the end of its compressed stream)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise UserError(f"{file}: not a valid gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{file}: not UTF-8 text, so not a JSON trace") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{file}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise UserError(f"{file}: JSON nested too deeply to be a trace") from None
    except OSError as exc:
        raise UserError(f"{file}: cannot read it: {exc.strerror or exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        keys = ", ".join(list(data)[:5]) if isinstance(data, dict) else type(data).__name__
        raise UserError(f"{file}: JSON of another shape, not a Kineto trace: no traceEvents list "
                        f"(found: {keys or 'an empty object'})")
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    if not any(e.get("ph") == "X" and "ts" in e and "dur" in e for e in events):
        raise UserError(f"{file}: a trace with no complete (\"X\") events: nothing ran in it")
    try:
        trace = build_trace(events)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{file}: a malformed trace event ({type(exc).__name__}: {exc})") from None
    if not trace.steps and not _kernels(trace) and steps is None:
        raise UserError(f"{file}: no ProfilerStep#N spans and no GPU kernels: its steps cannot be found (profile with a "
                        "schedule and call prof.step() every step, or pass --steps N for a trace of N whole steps)")
    return data, trace


def _rank_trace(file: Path, data: dict[str, Any], trace: Trace, *, rank: int, rank_from: str) -> RankTrace:
    info = _distributed(data)
    props = [p for p in data.get("deviceProperties") or [] if isinstance(p, dict)]
    cuda = bool(_kernels(trace) or props)
    device = _device_of(trace, props) if cuda else {}
    world = info.get("world_size")
    name = device.get("name")
    return RankTrace(
        path=file, rank=rank, rank_from=rank_from, world_size=world if _is_int(world) and world > 0 else None,
        backend=str(info.get("backend") or ""), device_type="cuda" if cuda else "cpu",
        device_name=str(name) if name else None, device_properties=device, host_name=str(data.get("host_name") or ""),
        trace=trace,
    )


def _device_of(trace: Trace, props: list[dict[str, Any]]) -> dict[str, Any]:
    """The deviceProperties entry of the GPU the rank's kernels ran on (the "device" arg most of them carry); the
    first entry when the kernels do not say (Kineto lists every GPU of the host, not only the rank's)."""
    if not props:
        return {}
    used = Counter(x.event.args.get("device") for x in _kernels(trace) if _is_int(x.event.args.get("device")))
    if used:
        index = used.most_common(1)[0][0]
        match = next((p for p in props if p.get("id") == index), None)
        if match is not None:
            return match
    return props[0]


def _kernels(trace: Trace) -> list[Any]:
    return [x for x in trace.device if x.event.cat == "kernel"]


def _distributed(data: dict[str, Any]) -> dict[str, Any]:
    info = data.get("distributedInfo")
    return info if isinstance(info, dict) else {}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


__all__ = ["RankTrace", "check_out_apart", "rank_traces"]

"""torch's exported Chrome trace → the file perfscope keeps: one that Perfetto and HTA open as it is.

Design notes: docs/trace.md."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfscope.results.io import write_gzip

STEP_LABEL = re.compile(rb'"ProfilerStep#(\d+)"')
_HEADER_END = b'"traceEvents"'
_MAX_HEADER_LINES = 10_000
"""A document whose traceEvents key does not come within this many lines is left without added metadata."""


def distributed_info() -> dict[str, Any]:
    """This process's place in torch.distributed, as HTA reads it: rank, world size, backend (None when alone)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return {"backend": str(dist.get_backend()), "rank": int(dist.get_rank()), "world_size": int(dist.get_world_size())}
    except Exception:  # noqa: BLE001 - a broken process group must not cost the trace
        pass
    return {"backend": None, "rank": 0, "world_size": 1}


def trace_file_name(info: dict[str, Any]) -> str:
    return f"rank{int(info.get('rank') or 0)}.json.gz"


def renumber(line: bytes, first_step: int) -> bytes:
    """Every quoted `ProfilerStep#N` label on the line, as `ProfilerStep#(first_step + N)`."""
    if not first_step or b"ProfilerStep#" not in line:
        return line
    return STEP_LABEL.sub(lambda m: b'"ProfilerStep#%d"' % (first_step + int(m.group(1))), line)


def _with_metadata(header: bytes, info: dict[str, Any]) -> bytes:
    """``header`` (the document up to traceEvents) with distributedInfo, unless torch already wrote one."""
    if b'"distributedInfo"' in header:
        return header
    brace = header.find(b"{")
    if brace < 0 or header[:brace].strip():  # not an object (a bare event list): no place for metadata
        return header
    entry = b'\n  "distributedInfo": ' + json.dumps(info).encode() + b","
    return header[: brace + 1] + entry + header[brace + 1 :]


def rewritten(lines: Iterator[bytes], *, first_step: int, info: dict[str, Any]) -> Iterator[bytes]:
    """The trace's lines with the step labels renumbered and distributedInfo in its header."""
    header: list[bytes] = []
    for line in lines:
        header.append(renumber(line, first_step))
        if _HEADER_END in line:
            yield _with_metadata(b"".join(header), info)
            break
        if len(header) >= _MAX_HEADER_LINES:
            yield b"".join(header)
            break
    else:  # the document ended before any traceEvents key
        yield b"".join(header)
        return
    for line in lines:
        yield renumber(line, first_step)


def write_trace(raw: Path, out_path: Path, *, first_step: int, info: dict[str, Any]) -> Path:
    """Rewrite torch's exported ``raw`` JSON into the gzipped ``out_path`` (atomically, through results.io)."""
    with open(raw, "rb") as fh:
        return write_gzip(out_path, rewritten(iter(fh), first_step=first_step, info=info))

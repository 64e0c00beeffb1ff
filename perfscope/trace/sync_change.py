"""A sync that appeared: the call sites where the host waits on the device more often than in an earlier capture.

Design notes: docs/trace.md."""

from __future__ import annotations

from pathlib import Path

from perfscope.results.trace_facts import SyncFacts
from perfscope.trace.events import read_trace
from perfscope.trace.export import distributed_info, trace_file_name
from perfscope.trace.sync import sync_facts
from perfscope.trace.window import window

MORE_PER_STEP = 0.5
"""The least rise in waits per step at one call site that is named (one wait every other step)."""


def rank_trace(folder: Path) -> Path:
    """This rank's trace in a capture folder (rank<R>.json.gz, as TraceCapture names it)."""
    return folder / trace_file_name(distributed_info())


def capture_syncs(folder: Path, *, steps: int = 1) -> SyncFacts | None:
    """The host waits in this rank's trace in ``folder``, or None when the capture wrote none; ``steps`` only for
    a trace without ProfilerStep#N spans."""
    path = rank_trace(folder)
    if not path.is_file():
        return None
    trace = read_trace(path)
    return sync_facts(trace, window(trace, steps))


def new_syncs(before: SyncFacts, after: SyncFacts) -> list[str]:
    """Each call site waiting at least MORE_PER_STEP more times per step in ``after``, most added first."""
    added = {site: n - before.sites.get(site, 0.0) for site, n in after.sites.items()}
    return [f"a new sync: {site} {after.sites[site]:.2g} per step (was {before.sites.get(site, 0.0):.2g})"
            for site, more in sorted(added.items(), key=lambda kv: -kv[1]) if more >= MORE_PER_STEP]

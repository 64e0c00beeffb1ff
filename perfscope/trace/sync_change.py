"""A sync that appeared: the call sites where the host waits on the device more often than in an earlier capture.

    before, after = capture_syncs(Path("watch/reference-step35")), capture_syncs(Path("watch/capture-step412"))
    new_syncs(before, after)   # ["a new sync: aten::item > aten::_local_scalar_dense (DtoH copy) 2.5 per step (was 0)"]

The watch compares the capture it takes after an alarm with the one it took when it set its reference: a
`.item()`, a `.cpu()`, a `torch.cuda.synchronize()` added to the loop (a logging change, a metric computed on the
device) shows as a call site waiting more often per step. Sites come from perfscope.trace.sync (the runtime calls
in which the host waited, by the ops around them); a CPU trace has none, so on CPU nothing is ever named.
"""

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

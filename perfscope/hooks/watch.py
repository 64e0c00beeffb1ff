"""The watch: a lasting step-time shift in a long job, caught by a change-point test (a one-sided CUSUM on the log
step time), captured and named.

    prof = perfscope.Profiler(model, opt, watch=True)                  # or watch=WatchConfig(out="watch/", ...)

Design notes (the test, its tuning, what an alarm writes): docs/hooks.md.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfscope.hooks.clocks import ClockReading, throttled
from perfscope.measure.lazy_msg import msg, words
from perfscope.stats import robust_sigma

if TYPE_CHECKING:
    from perfscope.measure.window import StepRecord
    from perfscope.results.messages import Message
    from perfscope.results.trace_facts import SyncFacts

LOG = logging.getLogger("perfscope")


@dataclass
class WatchConfig:
    out: str | None = None
    """Where findings and captures go (default: a perfscope-watch-* temporary folder, named in the warning)."""
    reference_steps: int = 30
    noise_floor: float = 0.05
    """The least σ of log step time assumed (0.05 ≈ 5 %)."""
    drift: float = 1.0
    threshold: float = 8.0
    clip: float = 3.0
    capture_steps: int = 5
    max_alarms: int = 5
    reference_capture: bool = True
    """Trace capture_steps steps once, at the first reference: what an alarm's capture is compared with (new syncs)."""


@dataclass
class WatchFinding:
    """What changed, from when: the watch's alarm as written to watch-step<N>.json."""

    began_step: int
    began_at: str
    """Wall-clock time (UTC, ISO 8601) the first shifted step ended."""
    detected_step: int
    step_time_s: tuple[float, float]
    """Median step time: the reference's, and since the change."""
    data_wait_share: tuple[float, float]
    recompiles: int | None
    """torch.compile graphs compiled between the reference and the alarm (None: nothing compiled)."""
    capture: str | None
    changes: list[str] = field(default_factory=list)
    """In words (the note on the run, "watch_step_time_shifted", carries them as messages)."""


@dataclass(slots=True)
class _Seen:
    index: int
    time_s: float
    wait_s: float
    at: float


class Watch:
    """The CUSUM over timed steps; see the module docstring."""

    def __init__(self, config: WatchConfig, *, capture: Callable[[int, Path], bool],
                 graphs: Callable[[], int | None] = lambda: None, notes: list[Message] | None = None,
                 clocks: Callable[[], ClockReading | None] = lambda: None,
                 syncs: Callable[[Path], SyncFacts | None] | None = None) -> None:
        self.config = config
        self.out = Path(config.out) if config.out else Path(tempfile.mkdtemp(prefix="perfscope-watch-"))
        self._capture, self._graphs, self._notes = capture, graphs, notes if notes is not None else []
        self.findings: list[WatchFinding] = []
        self._reference: list[_Seen] = []
        self._since: deque[_Seen] = deque(maxlen=1000)
        self._mu = self._sigma = 0.0
        self._ref_wait = self._ref_time = 0.0
        self._ref_graphs: int | None = None
        self._s = 0.0
        self._clocks, self._syncs = clocks, syncs
        self._ref_clock: ClockReading | None = None
        self._ref_syncs: SyncFacts | None = None
        self._pending: tuple[Path, WatchFinding | None, int] | None = None
        """A capture whose trace is awaited: its folder, the alarm's finding (None: the reference's), the last step
        it can still be written by."""
        self._analysis: threading.Thread | None = None

    def add(self, record: StepRecord) -> None:
        """One timed step; never raises into the loop (a failure turns the watch off, with one warning)."""
        c = self.config
        if self._pending is not None:
            self._collect(record.index)
        if len(self.findings) >= c.max_alarms or record.time_s <= 0:
            return
        if len(self._reference) < c.reference_steps:
            self._reference.append(_Seen(record.index, record.time_s, record.data_wait_s, time.time()))
            if len(self._reference) == c.reference_steps:
                self._set_reference(record.index)
            return
        z = max(-c.clip, min(c.clip, (math.log(record.time_s) - self._mu) / self._sigma))
        self._s = max(0.0, self._s + z - c.drift)
        if self._s == 0.0:
            if self._since:
                self._since.clear()
            return
        self._since.append(_Seen(record.index, record.time_s, record.data_wait_s, time.time()))
        if self._s > c.threshold:
            try:
                self._alarm(record.index)
            except Exception as exc:  # noqa: BLE001 - the watch is never the job's problem
                self.config.max_alarms = 0
                LOG.warning("perfscope: the watch stopped after an error: %s: %s", type(exc).__name__, exc)

    def settle(self, timeout_s: float | None = None) -> None:
        """Wait for the comparison of the last capture (tests; a job's end does not wait for it)."""
        if self._analysis is not None:
            self._analysis.join(timeout_s)

    def _set_reference(self, index: int) -> None:
        logs = [math.log(s.time_s) for s in self._reference]
        self._mu = statistics.median(logs)
        self._sigma = max(robust_sigma(logs, self._mu), self.config.noise_floor)
        self._ref_time = sum(s.time_s for s in self._reference)
        self._ref_wait = sum(s.wait_s for s in self._reference)
        self._ref_graphs = self._graphs()
        self._s = 0.0
        self._since.clear()
        self._ref_clock = self._clocks()
        if self.config.reference_capture and not self.findings and self._ref_syncs is None and self._pending is None:
            self._request(self.out / f"reference-step{index}", None, index)

    def _request(self, folder: Path, finding: WatchFinding | None, index: int) -> bool:
        """Ask for a capture of the next capture_steps steps into ``folder``; its trace is compared once written."""
        captured = self._capture(self.config.capture_steps, folder)
        if captured:
            self._pending = (folder, finding, index + self.config.capture_steps + 10)
        return captured

    def _collect(self, index: int) -> None:
        """At each timed step while a capture is awaited: once its trace is there, compare it in the background."""
        from perfscope.trace.sync import rank_trace  # here: the trace readers load only once one is needed

        assert self._pending is not None
        folder, finding, by = self._pending
        if rank_trace(folder).is_file():
            self._pending = None
            previous = self._analysis
            self._analysis = threading.Thread(target=self._compare, args=(folder, finding, previous),
                                              name="perfscope-watch", daemon=True)
            self._analysis.start()
        elif index > by:
            self._pending = None  # the capture wrote nothing (a profiler of the user's ran, the disk is full)

    def _compare(self, folder: Path, finding: WatchFinding | None, previous: threading.Thread | None) -> None:
        """This capture's host waits against the reference's: a new sync is added to the finding."""
        from perfscope.trace.sync import capture_syncs, new_syncs

        if previous is not None:
            previous.join()
        try:
            syncs = (self._syncs or capture_syncs)(folder)
        except Exception as exc:  # noqa: BLE001 - a trace the watch cannot read is not the job's problem
            LOG.info("perfscope watch: could not read the syncs of %s: %s: %s", folder, type(exc).__name__, exc)
            return
        before, self._ref_syncs = self._ref_syncs, syncs
        if finding is None or before is None or syncs is None or not (changes := new_syncs(before, syncs)):
            return
        finding.changes.extend(changes)
        self._write(finding)
        note = msg("watch_new_syncs", step=finding.detected_step, changes=list(changes))
        LOG.warning("perfscope %s", words(note))
        self._notes.append(note)

    def _alarm(self, index: int) -> None:
        since = list(self._since)
        before = statistics.median(s.time_s for s in self._reference)
        after = statistics.median(s.time_s for s in since)
        wait_before = self._ref_wait / self._ref_time if self._ref_time > 0 else 0.0
        after_time = sum(s.time_s for s in since)
        wait_after = sum(s.wait_s for s in since) / after_time if after_time > 0 else 0.0
        graphs = self._graphs()
        recompiles = graphs - (self._ref_graphs or 0) if graphs is not None else None
        changes = [msg("watch_step_time", before=before, after=after),
                   msg("watch_data_wait", before=wait_before, after=wait_after)]
        if recompiles:
            changes.append(msg("watch_recompiles", graphs=recompiles))
        if clock := throttled(self._ref_clock, self._clocks()):
            changes.append(clock)
        added = after_time / len(since) - self._ref_time / len(self._reference)  # per step, means
        added_wait = sum(s.wait_s for s in since) / len(since) - self._ref_wait / len(self._reference)
        if added > 0 and added_wait >= 0.5 * added:
            changes.append(msg("watch_data_wait_added", wait=added_wait, added=added))
        capture_dir = self.out / f"capture-step{index}"
        began, began_at = since[0], _iso(since[0].at)
        note = msg("watch_step_time_shifted", began=began.index, at=began_at, detected=index, changes=changes)
        finding = WatchFinding(began_step=began.index, began_at=began_at, detected_step=index,
                               step_time_s=(before, after), data_wait_share=(wait_before, wait_after),
                               recompiles=recompiles, capture=None, changes=[words(c) for c in changes])
        captured = self._request(capture_dir, finding, index)
        finding.capture = str(capture_dir) if captured else None
        self.findings.append(finding)
        self._write(finding)
        where = (f"; its next {self.config.capture_steps} steps are traced into {capture_dir} (`perfscope trace` "
                 "reads them)") if captured else ""
        LOG.warning("perfscope %s%s", words(note), where)
        self._notes.append(note)
        self._reference = []  # a new reference from here: a later change is caught against the new regime

    def _write(self, finding: WatchFinding) -> None:
        """watch-step<N>.json, whole or as it was (the job may end while the comparison's daemon thread writes)."""
        path = self.out / f"watch-step{finding.detected_step}.json"
        self.out.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(asdict(finding), indent=2) + "\n")
        path.with_suffix(".tmp").replace(path)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")


def as_watch(watch: bool | WatchConfig | dict[str, Any], **kwargs: Any) -> Watch | None:
    """The Profiler's `watch=` argument as a Watch (None when off)."""
    if watch is False or watch is None:
        return None
    return Watch(watch if isinstance(watch, WatchConfig) else WatchConfig(**(watch if isinstance(watch, dict) else {})),
                 **kwargs)

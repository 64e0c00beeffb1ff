"""The words of why a trace capture left no trace (perfscope.wording.capture): one case per template, so a template's
words change only on purpose; tests elsewhere assert codes."""

from __future__ import annotations

import pytest

from perfscope.results.messages import Message, msg
from perfscope.wording import words
from perfscope.wording.capture import CAPTURE

CASES: list[tuple[Message, str]] = [
    (msg("trace_empty"),
     "the profiler produced an empty trace"),
    (msg("trace_too_large", size=72_400_000, max_bytes=50_000_000),
     "trace of 72 MB (gzipped) exceeds the 50 MB cap: shorten the window"),
    (msg("trace_export_failed", error="OSError: disk full"),
     "trace export failed: OSError: disk full"),
    (msg("memory_breakdown_failed", error="KeyError: 'device'"),
     "memory breakdown failed: KeyError: 'device'"),
    (msg("capture_profiler_running"),
     "a profiler is already running on this thread: capture skipped (yours is left alone)"),
    (msg("profiler_start_failed", error="RuntimeError: CUPTI unavailable"),
     "the profiler could not start: RuntimeError: CUPTI unavailable"),
    (msg("profiler_step_failed", error="RuntimeError: boom"),
     "profiler step failed: RuntimeError: boom"),
    (msg("profiler_stop_failed", error="RuntimeError: already stopped"),
     "profiler stop failed: RuntimeError: already stopped"),
    (msg("trace_window_incomplete"),
     "no trace was produced (the window did not complete)"),
    (msg("trace_not_captured", notes=[msg("trace_empty"), msg("trace_unavailable")]),
     "the profiler produced an empty trace; trace unavailable"),
]


@pytest.mark.parametrize(("message", "said"), CASES, ids=[m.code for m, _ in CASES])
def test_each_template_says_what_it_said_as_prose(message: Message, said: str) -> None:
    assert words(message) == said


def test_every_capture_template_has_a_case() -> None:
    assert set(CAPTURE) <= {m.code for m, _ in CASES}

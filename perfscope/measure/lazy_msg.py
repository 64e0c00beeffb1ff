"""msg() and words() for the modules a disabled Profiler imports: the results model loads at the first message.

`import perfscope.results.messages` runs perfscope/results/__init__.py, which loads the whole results model
(~50 ms on a busy 2-core VM, -X importtime; torch itself ~1.3 s), and a disabled Profiler (PERFSCOPE_DISABLE=1)
imports none of it (tests/test_hooks.py::test_disabled_profiler_imports_nothing_heavy). Those modules (hooks/
capture, watch, clocks, ondemand, flopstep, observe; measure/allocator_snapshot) build their messages here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfscope.results.messages import Message


def msg(code: str, **params: Any) -> Message:
    """perfscope.results.messages.msg, imported at the first call."""
    from perfscope.results.messages import Message

    return Message(code, params)


def words(message: Message) -> str:
    """perfscope.wording.words, imported at the first call."""
    from perfscope.wording import words as worded

    return worded(message)

"""The words of every message a run records (perfscope.results.messages): one template per code.

    words(msg("no_timed_step"))    # "no timed step"

The only place a warning, an `unavailable` reason or a flag becomes prose, for the HTML page, the Markdown, the
terminal and `perfscope check` alike. A template is a str.format string over the message's parameters, or a
function of them (keyword-only) where the sentence depends on them; a parameter that is itself a message is worded
first. tests/test_wording.py checks that every code perfscope writes has a template and supplies its parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.results.messages import Message


def _persistent_load(*, runs: int, spoiled: dict[str, int], last: str, gave_up_after: int | None = None) -> str:
    listed = ", ".join(f"{name} (×{count})" for name, count in spoiled.items())
    return (f"other load on this machine persisted through {runs} run(s) of a measurement, "
            f"{sum(spoiled.values())} time(s): {listed} (the last: {last}): those runs are not used as evidence"
            + (f"; after {gave_up_after} times a contended run was no longer measured again" if gave_up_after else "")
            + "; measure on a quiet machine")


def _stack_failed(*, knobs: list[str], reason: str, joining: str, trial: str) -> str:
    return (f"{' + '.join(knobs)} together failed ({reason}), though {joining} "
            f"alone and the stack without it ran: see the failed trial {trial}")


Wording = str | Callable[..., str]

WORDING: dict[str, Wording] = {
    # read from files written before messages were records (perfscope.results.migrate)
    "legacy": "{text}",
    "persistent_load_v2": "{text}",
    # results-level warnings
    "persistent_load": _persistent_load,
    "stack_failed": _stack_failed,
}


def words(message: Message) -> str:
    """The prose of ``message``; a code without a template is a bug, said with the code rather than raised."""
    template = WORDING.get(message.code)
    params = {k: _param(v) for k, v in message.params.items()}
    if template is None:
        return f"[{message.code}] {params}"
    return template.format(**params) if isinstance(template, str) else template(**params)


def _param(value: Any) -> Any:
    if isinstance(value, Message):
        return words(value)
    if isinstance(value, list):
        return [_param(v) for v in value]
    return value

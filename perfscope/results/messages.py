"""What a run has to say, as records: a code and its parameters, never prose.

    msg("no_timed_step")                                  # Message(code="no_timed_step", params={})
    msg("nvml_error", error="NVMLError: not supported")   # parameters are JSON values, or other messages

Design notes: docs/results.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LEGACY = "legacy"
"""The code of a message read from a file written before messages were records: its words, kept as they were."""

NUMERICS = "numerics"
"""The code of a semantics change that only alters numerics (``change``: which): the one kind perfscope.ranking lets
a recommendation carry; any other code in KnobOutcome.changes_semantics changes the training recipe."""


@dataclass(frozen=True)
class Message:
    """A code (a key of perfscope.wording.WORDING) and the parameters its wording fills in."""

    code: str
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not self.code:
            raise ValueError(f"a message code must be a non-empty string, got {self.code!r}")
        if not isinstance(self.params, dict):
            raise ValueError(f"message {self.code!r}: params must be an object")
        # A nested message comes back from JSON as {"code", "params"}: typed again here, at any depth.
        object.__setattr__(self, "params", {str(k): _typed(v) for k, v in self.params.items()})

    def __hash__(self) -> int:
        return hash((self.code, json.dumps(self.params, sort_keys=True, default=repr)))


def msg(code: str, **params: Any) -> Message:
    """The message ``code`` with ``params`` (tests/test_wording.py checks every call against its wording)."""
    return Message(code, params)


def legacy(text: str) -> Message:
    """Words written before messages were records (an older results file), kept verbatim."""
    return Message(LEGACY, {"text": text})


def _typed(value: Any) -> Any:
    if (isinstance(value, dict) and set(value) == {"code", "params"} and isinstance(value["code"], str) and value["code"]
            and isinstance(value["params"], dict)):
        return Message(value["code"], value["params"])
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return value


def error(exc: BaseException) -> str:
    """An exception as a message parameter: its type and text (the words around it are the wording's)."""
    return f"{type(exc).__name__}: {exc}"

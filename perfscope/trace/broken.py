"""Complete events whose times cannot be true: counted, skipped and reported, never read as work.

    why_broken(float("nan"), 5.0)       # "a NaN timestamp or duration"
    unusable_text(trace.unusable)       # "3 events unusable and skipped: 2 with a negative duration, 1 with ..."

Why: a kernel with a NaN start used to vanish ("no device activity"), a negative duration left the GPU 0 % busy and
a 1e300 µs one made it 100 % busy, all without a word. perfscope.trace.events skips such an event as it reads it
and counts it by why; the facts' notes say how many were skipped, and a file is refused only when nothing usable
is left.
"""

from __future__ import annotations

import math
from collections import Counter

from perfscope.results.messages import Message, msg
from perfscope.wording import words

MAX_DURATION_US = 86_400e6
"""A complete event longer than a day is a broken record (a 1e300 µs kernel), not something that ran."""


def why_broken(ts: float, dur: float) -> str:
    """Why a complete event's times are unusable, in a reader's words."""
    if math.isnan(ts) or math.isnan(dur):
        return "a NaN timestamp or duration"
    if math.isinf(ts) or math.isinf(dur):
        return "an infinite timestamp or duration"
    return "a negative duration" if dur < 0 else "a duration longer than a day"


def unusable_note(unusable: Counter[str]) -> Message | None:
    """How many events were skipped and why (most common first); None when none were."""
    return msg("unusable_events", counts=dict(unusable.most_common())) if sum(unusable.values()) else None


def unusable_text(unusable: Counter[str]) -> str:
    """unusable_note in words; "" when none were skipped."""
    note = unusable_note(unusable)
    return words(note) if note is not None else ""


__all__ = ["MAX_DURATION_US", "unusable_note", "unusable_text", "why_broken"]

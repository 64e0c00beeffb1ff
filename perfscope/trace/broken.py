"""Complete events whose times cannot be true: counted, skipped and reported, never read as work.

Design notes: docs/trace.md."""

from __future__ import annotations

import math
from collections import Counter

MAX_DURATION_US = 86_400e6
"""A complete event longer than a day is a broken record (a 1e300 µs kernel), not something that ran."""


def why_broken(ts: float, dur: float) -> str:
    """Why a complete event's times are unusable, in a reader's words."""
    if math.isnan(ts) or math.isnan(dur):
        return "a NaN timestamp or duration"
    if math.isinf(ts) or math.isinf(dur):
        return "an infinite timestamp or duration"
    return "a negative duration" if dur < 0 else "a duration longer than a day"


def unusable_text(unusable: Counter[str]) -> str:
    """One clause saying how many events were skipped and why; "" when none were."""
    total = sum(unusable.values())
    if not total:
        return ""
    why = ", ".join(f"{n} with {reason}" for reason, n in unusable.most_common())
    return f"{total} complete event(s) unusable and skipped: {why}"


__all__ = ["MAX_DURATION_US", "unusable_text", "why_broken"]

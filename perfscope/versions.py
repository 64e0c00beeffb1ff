"""The one parser of torch (and other package) version strings: what a feature gate compares.

Design notes: docs/internals.md."""

from __future__ import annotations

import re

_MAJOR_MINOR = re.compile(r"\s*v?(\d+)\.(\d+)")


def major_minor(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string ("2.13.0+cpu" → (2, 13)); None when it has none (None, "", "unknown")."""
    match = _MAJOR_MINOR.match(version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def at_least(version: str | None, wanted: tuple[int, int]) -> bool | None:
    """Whether ``version`` is ``wanted`` (major, minor) or later; None when the version cannot be read."""
    parsed = major_minor(version)
    return None if parsed is None else parsed >= wanted

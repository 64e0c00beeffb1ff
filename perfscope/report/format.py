"""Human-readable numbers for the report: one place decides units, precision and the "n/a" wording.

    >>> fmt_bytes(10 * 2**30)
    '10.0 GiB'
    >>> fmt_seconds(0.1012)
    '101.2 ms'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfscope.knobs.base import size

NA = "n/a"


@dataclass(kw_only=True, slots=True)
class Row:
    """One labelled line of a facts table (environment, workload, a distributed run's launch)."""

    label: str
    value: str


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def fmt_bytes(value: float | None) -> str:
    """Binary units, since device memory is sold and reported (nvidia-smi, torch) in GiB."""
    return NA if _missing(value) else size(float(value))  # type: ignore[arg-type]


def fmt_seconds(value: float | None) -> str:
    if _missing(value):
        return NA
    v = float(value)  # type: ignore[arg-type]
    if abs(v) < 1e-3:
        return f"{v * 1e6:.1f} µs"
    if abs(v) < 1:
        return f"{v * 1e3:.1f} ms"
    if abs(v) < 120:
        return f"{v:.2f} s"
    return f"{v / 60:.1f} min"


def fmt_percent(fraction: float | None, digits: int = 1) -> str:
    """A 0..1 fraction as a percentage."""
    if _missing(fraction):
        return NA
    return f"{float(fraction) * 100:.{digits}f} %"  # type: ignore[arg-type]


def fmt_rate(value: float | None, unit: str) -> str:
    """Throughput with a precision that stays readable from 0.5/s to millions/s."""
    if _missing(value):
        return NA
    v = float(value)  # type: ignore[arg-type]
    text = f"{v:,.0f}" if v >= 100 else f"{v:,.2f}" if v >= 1 else f"{v:.3g}"
    return f"{text} {unit}"


def fmt_ratio(ratio: float | None) -> str:
    if _missing(ratio):
        return NA
    return f"{float(ratio):.2f}×"  # type: ignore[arg-type]


def fmt_interval(low: float | None, high: float | None) -> str:
    if _missing(low) or _missing(high):
        return ""
    return f"[{float(low):.2f}, {float(high):.2f}]"  # type: ignore[arg-type]


def fmt_count(value: float | None) -> str:
    if _missing(value):
        return NA
    v = float(value)  # type: ignore[arg-type]
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.0f}"


def gain_text(ratio: float) -> str:
    """A throughput ratio in words: "1.37× faster" / "16.41× slower", in the report and the terminal alike."""
    return f"{fmt_ratio(ratio)} faster" if ratio >= 1 else f"{fmt_ratio(1 / ratio)} slower"

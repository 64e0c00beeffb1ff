"""Human-readable numbers for the report: one place decides units, precision and the "n/a" wording.

    >>> fmt_bytes(10 * 2**30)
    '10.0 GiB'
    >>> fmt_seconds(0.1012)
    '101.2 ms'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfscope.knobs.base import size

NA = "n/a"


@dataclass(kw_only=True, slots=True)
class Row:
    """One labelled line of a facts table (environment, workload, a distributed run's launch)."""

    label: str
    value: str


@dataclass(kw_only=True, slots=True)
class Cell:
    """One value of a table or of the headline, with what is shown beside it."""

    text: str
    note: str = ""  # a second, quieter line: the p10–p90 range, why a value is n/a, a straggler in words
    tags: list[str] = field(default_factory=list)  # short labels after the text: "straggler", "best", "this run"
    code: bool = False  # a name set in monospace: an op, a function, a node
    title: str = ""  # the page's hover text: a truncated name in full
    style: str = ""  # the page's CSS class of the value: "status status-oom"


@dataclass(kw_only=True, slots=True)
class Table:
    """A table as the view decided it, header and cells, which the page (reports/templates/_table.html.j2) and the
    Markdown (report/markdown.py) each lay out as it is."""

    header: list[str]
    align: str  # a letter per column: "l" text, "r" a number
    rows: list[list[Cell]] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)  # each row's highlight ("straggler", "best"; a CSS class), or ""

    def add(self, *values: str | Cell, mark: str = "") -> None:
        self.rows.append([v if isinstance(v, Cell) else Cell(text=v) for v in values])
        self.marks.append(mark)


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

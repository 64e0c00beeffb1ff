"""What a value in a results file may be, declared on the dataclass field it constrains.

    wall_s: float = field(metadata=SECONDS)                         # finite, 0 .. MAX_SECONDS
    mfu: float | None = field(default=None, metadata=NON_NEGATIVE)
    name: str = field(metadata=NAME)                                # at most MAX_NAME_CHARS characters

Design notes: docs/results.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from perfscope.errors import ResultsError

KEY = "perfscope.constraint"
"""The key of a field's metadata that holds its Constraint."""

MAX_SECONDS = 1e8
"""About three years: no step, window or run lasts longer; 1e308 s would overflow every sum it enters."""
MAX_NAME_CHARS = 1000
MAX_SERIES = 1_000_000
"""Per-step values kept for one run (analyze keeps at most a few thousand, hooks a 2,048-step sample)."""
MAX_FLOPS_PER_STEP = 1e30
MAX_TFLOPS = 1e9
INT64 = 2**63


@dataclass(frozen=True)
class Constraint:
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    max_len: int | None = None

    def check_number(self, value: float, where: str) -> None:
        if self.ge is not None and not value >= self.ge:
            raise ResultsError(f"{where}: must be >= {self.ge:g}, got {show(value)}")
        if self.gt is not None and not value > self.gt:
            raise ResultsError(f"{where}: must be > {self.gt:g}, got {show(value)}")
        if self.le is not None and not value <= self.le:
            raise ResultsError(f"{where}: must be <= {self.le:g}, got {show(value)}")

    def check_length(self, value: Any, where: str) -> None:
        if self.max_len is not None and len(value) > self.max_len:
            unit = "characters" if isinstance(value, str) else "entries"
            raise ResultsError(f"{where}: at most {self.max_len:,} {unit}, got {len(value):,}")


def rule(*, ge: float | None = None, gt: float | None = None, le: float | None = None,
         max_len: int | None = None) -> Mapping[str, Constraint]:
    """Field metadata holding a Constraint: ``field(metadata=rule(ge=0, le=1))``."""
    return MappingProxyType({KEY: Constraint(ge=ge, gt=gt, le=le, max_len=max_len)})


def of(f: dataclasses.Field[Any]) -> Constraint | None:
    return f.metadata.get(KEY)


def show(value: Any, limit: int = 60) -> str:
    """A value for a one-line error message: JSON's spelling, non-finite floats as NaN/Infinity, never long."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"{value:g}"
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    if isinstance(value, str):
        return json.dumps(value[:limit]) + ("..." if len(value) > limit else "")
    if isinstance(value, list):
        return f"a list of {len(value):,} items"
    if isinstance(value, dict):
        return f"an object of {len(value):,} keys"
    return type(value).__name__


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None: for readers of untrusted values."""
    return None if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) else float(value)


def check_finite(value: float, where: str) -> None:
    if not math.isfinite(value):
        raise ResultsError(f"{where}: must be finite, got {show(value)}")


def check_int64(value: int, where: str) -> None:
    if not -INT64 <= value < INT64:
        raise ResultsError(f"{where}: must fit in 64 bits, got {show(value)}")


NON_NEGATIVE = rule(ge=0)
FRACTION = rule(ge=0, le=1)
SECONDS = rule(ge=0, le=MAX_SECONDS)
SERIES_SECONDS = rule(ge=0, le=MAX_SECONDS, max_len=MAX_SERIES)
SERIES = rule(max_len=MAX_SERIES)
NAME = rule(max_len=MAX_NAME_CHARS)
FLOPS = rule(ge=0, le=MAX_FLOPS_PER_STEP)
TFLOPS = rule(ge=0, le=MAX_TFLOPS)
PEAK_TFLOPS = rule(gt=0, le=MAX_TFLOPS)

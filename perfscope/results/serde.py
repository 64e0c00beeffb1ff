"""Dataclasses <-> JSON-compatible values, guided by type hints.

    to_jsonable(results)                 # plain dicts/lists; non-finite floats -> None
    from_jsonable(Results, data)         # rebuilds the typed model; unknown keys are ignored

Kept apart from the model so the model stays a list of plain dataclasses, and apart from io so tests and
trial processes can convert without touching files.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal


def to_jsonable(value: Any) -> Any:
    """Dataclasses -> plain JSON types; non-finite floats -> None (the reason lives in ``unavailable``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def from_jsonable(tp: Any, data: Any) -> Any:
    """Rebuild ``tp`` from JSON data, guided by type hints. Unknown keys are ignored (forward compatible)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        last_error: Exception | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return from_jsonable(arg, data)
            except (TypeError, ValueError, KeyError) as exc:
                last_error = exc
        raise TypeError(f"{data!r} matches none of {tp}: {last_error}")
    if origin is Literal:
        if data not in typing.get_args(tp):
            raise ValueError(f"{data!r} is not one of {typing.get_args(tp)}")
        return data
    if origin is list:
        if not isinstance(data, list):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        (item,) = typing.get_args(tp) or (Any,)
        return [from_jsonable(item, v) for v in data]
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        _, value_tp = typing.get_args(tp) or (str, Any)
        return {k: from_jsonable(value_tp, v) for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = from_jsonable(hints[f.name], data[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f"{tp.__name__}.{f.name} is missing")
        return tp(**kwargs)
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise TypeError(f"expected a number, got {data!r}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"expected an integer, got {data!r}")
        return data
    if tp in (str, bool):
        if not isinstance(data, tp):
            raise TypeError(f"expected {tp.__name__}, got {data!r}")
        return data
    return data

"""Dataclasses <-> JSON-compatible values, guided by type hints.

    to_jsonable(results)                 # plain dicts/lists; non-finite floats -> None
    from_jsonable(Results, data)         # rebuilds the typed model, validating every value; unknown keys ignored

Kept apart from the model so the model stays a list of plain dataclasses, and apart from io so tests and
trial processes can convert without touching files.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal

from perfscope.errors import ResultsError
from perfscope.results import constraints
from perfscope.results.constraints import Constraint, check_finite, check_int64, show


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


def _child(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _key(where: str, key: str) -> str:
    return _child(where, key) if key.isidentifier() else f"{where}[{show(key)}]"


def _at(where: str) -> str:
    return where or "(top level)"


@functools.lru_cache(maxsize=None)
def _fields(tp: type) -> tuple[tuple[dataclasses.Field[Any], Any, bool], ...]:
    """(field, type hint, required) per field: type hints are resolved once per class, not per object."""
    hints = typing.get_type_hints(tp)
    return tuple(
        (f, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(tp) if f.init
    )


@functools.lru_cache(maxsize=None)
def _items(constraint: Constraint) -> Constraint:
    """The part of a field's constraint that applies to its items: the bounds, not the length."""
    return dataclasses.replace(constraint, max_len=None)


def from_jsonable(tp: Any, data: Any, where: str = "", constraint: Constraint | None = None) -> Any:
    """Rebuild ``tp`` from JSON data, guided by type hints, checking every value (against the field's ``constraint``)
    as it goes. A violation raises ResultsError naming the JSON path (``trials[3].metrics.samples_per_s: must be finite``).
    """
    origin = typing.get_origin(tp)
    if tp is Any:
        _check_free(data, where)
        return data
    if origin in (typing.Union, types.UnionType):
        return _union(tp, data, where, constraint)
    if origin is Literal:
        choices = typing.get_args(tp)
        if not any(type(data) is type(c) and data == c for c in choices):
            raise ResultsError(f"{_at(where)}: must be one of {', '.join(show(c) for c in choices)}, got {show(data)}")
        return data
    if (container := origin or tp) in (list, dict):
        if not isinstance(data, container):
            raise ResultsError(f"{_at(where)}: expected {'a list' if container is list else 'an object'}, got {show(data)}")
        if constraint is not None:
            constraint.check_length(data, _at(where))
        inner = _items(constraint) if constraint is not None else None
        if container is list:
            (item,) = typing.get_args(tp) or (Any,)
            return [from_jsonable(item, v, f"{where}[{i}]", inner) for i, v in enumerate(data)]
        _, value_tp = typing.get_args(tp) or (str, Any)
        if bad := [k for k in data if not isinstance(k, str)]:
            raise ResultsError(f"{_at(where)}: keys must be strings, got {show(bad[0])}")
        return {k: from_jsonable(value_tp, v, _key(where, k), inner) for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, data, where)
    if tp in _SCALARS:
        return _scalar(tp, data, _at(where), constraint)
    _check_free(data, where)
    return data


def _union(tp: Any, data: Any, where: str, constraint: Constraint | None) -> Any:
    args = typing.get_args(tp)
    if data is None:
        if type(None) in args:
            return None
        raise ResultsError(f"{_at(where)}: must not be null")
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:  # Optional[X]: X's own error is the clearest
        return from_jsonable(options[0], data, where, constraint)
    errors = []
    for option in options:
        try:
            return from_jsonable(option, data, where, constraint)
        except ResultsError as exc:
            errors.append(str(exc))
    raise ResultsError(f"{_at(where)}: {show(data)} matches none of the allowed types ({'; '.join(errors)})")


_SCALARS = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
"""The JSON scalars, as an error names what was expected."""


def _scalar(tp: type, data: Any, at: str, constraint: Constraint | None) -> Any:
    if isinstance(data, bool) != (tp is bool) or not isinstance(data, (int, float) if tp is float else tp):
        raise ResultsError(f"{at}: expected {_SCALARS[tp]}, got {show(data)}")
    if tp is float:
        try:
            data = float(data)
        except OverflowError:
            raise ResultsError(f"{at}: must be finite, got {show(data)}") from None
        check_finite(data, at)
    elif tp is int:
        check_int64(data, at)
    if constraint is not None and tp is not bool:
        (constraint.check_length if tp is str else constraint.check_number)(data, at)
    return data


def _dataclass(tp: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ResultsError(f"{_at(where)}: expected an object ({tp.__name__}), got {show(data)}")
    kwargs = {}
    known = set()
    for f, hint, required in _fields(tp):
        known.add(f.name)
        if f.name in data:
            kwargs[f.name] = from_jsonable(hint, data[f.name], _child(where, f.name), constraints.of(f))
        elif required:
            raise ResultsError(f"{_at(where)}: missing field {f.name!r} ({tp.__name__})")
    for key, value in data.items():  # ignored, but not a hiding place for NaN or a 1000-digit integer
        if key not in known:
            _check_free(value, _child(where, str(key)))
    try:
        return tp(**kwargs)
    except (TypeError, ValueError) as exc:  # the class's own checks (__post_init__)
        raise ResultsError(f"{_at(where)}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def _check_free(data: Any, where: str) -> None:
    """Free-form values (``Any``) get the rules every number obeys: finite floats, 64-bit ints."""
    stack = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, float):
            check_finite(value, _at(at))
        elif isinstance(value, int) and not isinstance(value, bool):
            check_int64(value, _at(at))
        elif isinstance(value, dict):
            stack.extend((v, _key(at, str(k))) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))

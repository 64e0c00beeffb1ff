"""Property tests of the results file (hypothesis): what perfscope writes it reads back unchanged, and what
anyone else writes either loads or is refused with a ResultsError (exit 2) — never another exception, and
never a loaded file holding a non-finite number.

The strategies are derived from the model itself (type hints + the constraints in field metadata), so a
field added to the model is generated, saved and reloaded here without touching this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import tempfile
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perfscope.results import SCHEMA_VERSION, Results, ResultsError  # noqa: E402
from perfscope.results.config import TrialConfig  # noqa: E402
from perfscope.results.constraints import INT64, Constraint, of  # noqa: E402
from perfscope.results.messages import Message

# derandomize: CI gives the same verdict on the same code (a property run found the unknown-key NaN; run
# `pytest tests/test_properties.py --hypothesis-seed=random` with more examples to search further).
SETTINGS = settings(max_examples=100, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

JSON_LEAVES = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)

TRIAL_CONFIGS = st.builds(
    TrialConfig,
    device=st.sampled_from(["cpu", "cuda"]),
    micro_batch_size=st.integers(1, 4096),
    grad_accum_steps=st.integers(1, 64),
    steps=st.none() | st.integers(1, 10_000),
    warmup_steps=st.integers(0, 100),
    precision=st.sampled_from(["fp32", "bf16", "fp16"]),
    tf32=st.none() | st.booleans(),
    compile=st.none() | st.sampled_from(["default", "reduce-overhead", "max-autotune"]),
    env=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=2),
    seed=st.integers(0, 2**31),
)
MESSAGES = st.builds(Message, code=st.text(min_size=1, max_size=12),
                     params=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3))
SPECIAL: dict[Any, st.SearchStrategy[Any]] = {TrialConfig: TRIAL_CONFIGS, Message: MESSAGES}
"""Types whose own __post_init__ rules (e.g. prefetch_factor needs workers) a generic strategy would break."""
FIXED: dict[tuple[Any, str], st.SearchStrategy[Any]] = {(Results, "schema_version"): st.just(SCHEMA_VERSION)}
"""Fields checked before typing (another schema version is refused, not validated)."""


def _number_bounds(c: Constraint | None) -> dict[str, Any]:
    if c is None:
        return {}
    low = c.ge if c.ge is not None else c.gt
    return {"min_value": low, "max_value": c.le, "exclude_min": c.gt is not None and c.ge is None}


def strategy_for(tp: Any, c: Constraint | None = None) -> st.SearchStrategy[Any]:
    """Values of type ``tp`` obeying constraint ``c`` (bounds apply to the numbers inside, length to ``tp`` itself)."""
    if tp in SPECIAL:
        return SPECIAL[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    items = dataclasses.replace(c, max_len=None) if c is not None else None
    size = min(3, c.max_len) if c is not None and c.max_len is not None else 3
    if tp is Any:
        return JSON_VALUES
    if origin in (typing.Union, __import__("types").UnionType):
        return st.one_of(*(st.none() if a is type(None) else strategy_for(a, c) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(strategy_for(args[0], items), max_size=size)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), strategy_for(args[1], items), max_size=size)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{f.name: FIXED[(tp, f.name)] if (tp, f.name) in FIXED else strategy_for(hints[f.name], of(f))
                                for f in dataclasses.fields(tp) if f.init})
    if tp is float:
        bounds = _number_bounds(c)
        return st.floats(allow_nan=False, allow_infinity=False, **{k: v for k, v in bounds.items() if v is not None})
    if tp is int:
        low = math.ceil(c.ge if c and c.ge is not None else (c.gt + 1 if c and c.gt is not None else -INT64))
        high = math.floor(c.le) if c and c.le is not None else INT64 - 1
        return st.integers(low, high)
    if tp is str:
        return st.text(max_size=min(12, c.max_len) if c and c.max_len else 12)
    if tp is bool:
        return st.booleans()
    raise NotImplementedError(tp)


RESULTS = strategy_for(Results)


def _roundtrip(results: Results) -> Results:
    with tempfile.TemporaryDirectory() as folder:
        return Results.load(results.save(Path(folder) / "results.json"))


@SETTINGS
@given(RESULTS)
def test_any_valid_results_round_trip_through_save_and_load_unchanged(results):
    assert _roundtrip(results) == results


HOSTILE_VALUES = st.sampled_from([
    float("nan"), float("inf"), float("-inf"), -1.0, -1, 1e308, 10**30, 0, "", "x" * 2000, True, None, [], {}, [[[[]]]],
    {"steps": "many"}, [float("nan")], 2**63,
])


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


def _mutate(doc: Any, draw: Any) -> Any:
    path = draw(st.sampled_from(_paths(doc)))
    if not path:
        return draw(HOSTILE_VALUES | JSON_VALUES)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.text(max_size=6))] = draw(HOSTILE_VALUES | JSON_VALUES)
    else:
        parent[path[-1]] = draw(HOSTILE_VALUES | JSON_VALUES)
    return doc


def _mangle_bytes(raw: bytes, draw: Any) -> bytes:
    action = draw(st.sampled_from(["none", "truncate", "flip", "insert"]))
    if action == "none" or not raw:
        return raw
    at = draw(st.integers(0, len(raw) - 1))
    if action == "truncate":
        return raw[:at]
    if action == "flip":
        return raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1:]
    return raw[:at] + draw(st.sampled_from([b"\xff", b"[" * 100, b"NaN", b"1e999", b'"', b"\\"])) + raw[at:]


def _all_finite(node: Any) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    if isinstance(node, dict):
        return all(_all_finite(v) for v in node.values())
    if isinstance(node, list):
        return all(_all_finite(v) for v in node)
    return True


@SETTINGS
@given(RESULTS, st.data())
def test_mutated_results_load_or_raise_results_error_only(results, data):
    doc = results.to_dict()
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data.draw)
    raw = _mangle_bytes(json.dumps(doc).encode(), data.draw)  # json.dumps writes NaN/Infinity as a hostile file would
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.json"
        path.write_bytes(raw)
        try:
            loaded = Results.load(path)
        except ResultsError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))
            return
    assert _all_finite(loaded.to_dict())  # what loads holds no NaN or Infinity anywhere


@SETTINGS
@given(st.data())
def test_check_against_a_mutated_baseline_exits_2_or_gives_a_verdict_never_a_traceback(data):
    """The CI gate end to end: a hostile baseline is exit 2; non-finite data never passes."""
    from perfscope.cli import main
    from perfscope.errors import EXIT_USER
    from tests.test_hostile_baselines import _runs

    doc = _runs().to_dict()
    for _ in range(data.draw(st.integers(1, 3))):
        doc = _mutate(doc, data.draw)
    with tempfile.TemporaryDirectory() as folder:
        current = str(_runs().save(Path(folder) / "current.json"))
        baseline = Path(folder) / "baseline.json"
        baseline.write_bytes(json.dumps(doc).encode())
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["check", current, "--baseline", str(baseline)])
    err = err.getvalue()
    assert "internal error" not in err and "Traceback" not in err
    assert code in (0, 1, 2, 3)
    if not _all_finite(doc):
        assert code == EXIT_USER

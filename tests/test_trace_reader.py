"""The streaming trace reader (perfscope/trace/reader.py, events.TraceBuilder) against reading the whole file.

The reference is the reader perfscope had before: json.load, then every complete event kept with every arg, every
Python frame, every ac2g flow. The streamed trace keeps far less (lean records, only the args a fact reads), so the
facts computed from both must be equal, figure for figure — on perfscope's own traces, HTA's real GPU traces, a
synthetic LLM-shaped trace, and the same files written compactly (events whose args close mid-object), gzip'ed,
read in tiny buffers and with the standard library's parser in place of orjson. Memory is checked with tracemalloc
(deterministic for a given input), never with wall time: timings live in benchmarks/large_trace.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import tracemalloc
import weakref
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from benchmarks.synthetic_trace import write_trace
from perfscope.errors import UserError
from perfscope.trace import offline, reader
from perfscope.trace.communication import communication_facts, exposed_collective_by_step
from perfscope.trace.events import DEVICE_WORK, HOST_ANNOTATIONS, KINDS, PYTHON, RUNTIME, STEP_PREFIX, Event, Trace
from perfscope.trace.facts import trace_facts
from perfscope.trace.inputs import assign_ranks, load_rank, read_trace
from perfscope.trace.table import NONE, EventColumns, Grower, Strings, ext_code
from tests.public_traces import public_trace

TRACES = Path(__file__).parent / "data" / "traces"
OWN = sorted(TRACES.glob("*/**/*.json.gz"))
PUBLIC = ["nccl_parser_config/nccl_data", "trace_filter/sampled_rank-0", "amd_trace/mi250_minitoy_train_ROCm6_2_kineto"]


class Raw(NamedTuple):
    """An event as the whole-file reader kept it: with its correlation and External id args."""

    event: Event
    correlation: int | None
    external_id: Any


KIND_OF = {"user_annotation": "annotations", "cpu_op": "cpu_ops", PYTHON: "python", **dict.fromkeys(RUNTIME, "runtime"),
           **dict.fromkeys(DEVICE_WORK, "device")}


def whole_file_trace(path: Path) -> Trace:
    """The trace as perfscope read it before streaming: json.load, every event and arg kept."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    lists: dict[str, list[Raw]] = {kind: [] for kind in KINDS}
    trace, flows, steps = Trace({}), {}, {}
    for e in raw:
        ph = e.get("ph")
        if ph in ("s", "f") and e.get("cat") == "ac2g" and "id" in e:
            flows[(e.get("pid"), e.get("tid"), float(e.get("ts", 0)))] = e["id"]
            continue
        if ph != "X" or "ts" not in e or "dur" not in e:
            continue
        args = e.get("args") or {}
        corr = args.get("correlation")
        event = Event(str(e.get("name", "")), str(e.get("cat", "")), float(e["ts"]), float(e["dur"]), e.get("pid"),
                      e.get("tid"), args)
        if event.cat in HOST_ANNOTATIONS and event.name.startswith(STEP_PREFIX):
            steps.setdefault(event.name, event.span)
            continue
        kind = KIND_OF.get(event.cat)
        if kind is not None:
            lists[kind].append(Raw(event, corr if isinstance(corr, int) and not isinstance(corr, bool) else None,
                                   args.get("External id")))
        if event.cat == "kernel" and type(args.get("device")) is int and args["device"] >= 0:
            trace.kernel_devices[args["device"]] += 1

    def correlation(raw: Raw) -> Any:
        e = raw.event
        return raw.correlation if raw.correlation is not None else flows.get((e.pid, e.tid, e.ts))

    trace.steps = sorted(steps.values())
    launches = {c: raw.event for raw in lists["runtime"] if (c := correlation(raw)) is not None}
    device = sorted(lists.pop("device"), key=lambda raw: raw.event.ts)
    strings = (Strings(), Strings(), Strings(), Strings(), Strings())
    trace.tables = {kind: _columns(events, strings) for kind, events in lists.items()}
    trace.tables["device"] = _columns(device, strings, [launches.get(correlation(e)) for e in device])
    return trace


def _columns(events: list[Raw], strings: tuple[Strings, ...], launches: list[Event | None] | None = None) -> EventColumns:
    """A kind's events as the columns the analyzers read (``launches``: device work's launch calls)."""
    names, cats, values, args, exts = strings
    grower = Grower()
    for e, correlation, external_id in events:
        a = -1
        if e.args:
            a = len(args.values)
            args.values.append(e.args)
        grower.rows.append((e.ts, e.dur, names.id(e.name), cats.id(e.cat), values.id(e.pid), values.id(e.tid),
                            NONE if correlation is None else correlation, ext_code(external_id, exts), a))
    cols = grower.columns()
    if launches is not None:
        cols["launch_ts"] = np.array([np.nan if x is None else x.ts for x in launches], np.float64)
        cols["launch_dur"] = np.array([np.nan if x is None else x.dur for x in launches], np.float64)
        cols["launch_pid"] = np.array([-1 if x is None else values.id(x.pid) for x in launches], np.int32)
        cols["launch_tid"] = np.array([-1 if x is None else values.id(x.tid) for x in launches], np.int32)
        cols["launch_name"] = np.array([-1 if x is None else names.id(x.name) for x in launches], np.int32)
    return EventColumns(cols, names=names.values, cats=cats.values, values=values.values, args=args.values)


def all_facts(path: Path, trace: Trace) -> list[Any]:
    out: list[Any] = []
    for device in ("cuda", "cpu"):
        out += [dataclasses.asdict(trace_facts(path, device_type=device, steps=2, trace=trace)),
                dataclasses.asdict(communication_facts(path, rank=0, device_type=device, steps=2, world_size=8, trace=trace)),
                exposed_collective_by_step(trace, device_type=device)]
    return out


def assert_same_facts(path: Path) -> None:
    streamed = read_trace(path)
    assert all_facts(path, streamed) == all_facts(path, whole_file_trace(path))
    assert len(streamed.steps) == len(whole_file_trace(path).steps)


@pytest.fixture(scope="module")
def llm_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llm") / "rank0.json"
    write_trace(path, target_bytes=3 << 20, seed=1, world_size=8)
    return path


@pytest.mark.parametrize("path", OWN, ids=lambda p: p.parent.name + "/" + p.name)
def test_streamed_facts_equal_whole_file_facts_on_perfscope_traces(path: Path) -> None:
    assert_same_facts(path)


@pytest.mark.parametrize("name", PUBLIC)
def test_streamed_facts_equal_whole_file_facts_on_real_gpu_traces(name: str) -> None:
    assert_same_facts(public_trace(name))


def test_streamed_facts_equal_on_a_synthetic_llm_trace(llm_trace: Path) -> None:
    facts = trace_facts(llm_trace, device_type="cuda", steps=1, trace=read_trace(llm_trace))
    assert facts.kernels.time_by_category.get("communication") and facts.gemm_shapes  # NCCL kernels, shapes read
    assert facts.trace_bytes == llm_trace.stat().st_size
    assert_same_facts(llm_trace)


def _rewritten(src: Path, dst: Path, **dump: Any) -> Path:
    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    out_open = gzip.open if dst.name.endswith(".gz") else open
    with out_open(dst, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        json.dump(data, fh, **dump)
    return dst


@pytest.mark.parametrize("form", ["compact", "gzip", "tiny buffer", "stdlib parser", "bare list"])
def test_every_way_of_reading_gives_the_same_facts(form: str, llm_trace: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Compact JSON puts "},{" inside events (args closing before "ts"): batches cut there fail to parse and are
    read event by event; a 512-character buffer splits nearly every event; json.loads stands in for orjson."""
    path = llm_trace
    if form == "compact":
        path = _rewritten(llm_trace, tmp_path / "compact.json", separators=(",", ":"))
    elif form == "gzip":
        path = _rewritten(llm_trace, tmp_path / "trace.json.gz", indent=1)
    elif form == "tiny buffer":
        monkeypatch.setattr(reader, "CHUNK", 512)
    elif form == "stdlib parser":
        monkeypatch.setattr(reader, "_LOADS", json.loads)
    else:
        events = json.loads(llm_trace.read_text())["traceEvents"]
        path = tmp_path / "bare.json"
        path.write_text(json.dumps(events))
    expected = all_facts(llm_trace, whole_file_trace(llm_trace))
    got = all_facts(llm_trace, read_trace(path))  # the facts' trace_bytes is the original file's, for both
    assert got == expected


def test_metadata_after_the_events_and_nan_args_are_read(tmp_path: Path) -> None:
    """Top-level keys may follow traceEvents; NaN (which Python's json writes and reads, orjson does not) is read."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 50, "pid": 1, "tid": 1,
               "args": {"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"], "weird": float("nan")}}]
    path = tmp_path / "late.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 3, "world_size": 4}}, indent=2))
    (ranked,) = assign_ranks(path, [load_rank(path)])
    assert (ranked.rank, ranked.rank_from, ranked.world_size) == (3, "distributedInfo", 4)
    assert ranked.trace is not None and ranked.trace.events("cpu_ops")[0].args["Input Dims"] == [[4, 8], [8, 2]]


# ------------------------------------------------------------------------------------------------ errors


def _lines_trace(n: int = 400) -> str:
    events = [json.dumps({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1})
              for i in range(n)]
    return '{\n"traceEvents": [\n' + ",\n".join(events) + "\n]\n}\n"


@pytest.mark.parametrize("chunk", [reader.CHUNK, 300])
def test_broken_json_names_the_file_line_and_column(chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "CHUNK", chunk)
    lines = _lines_trace().splitlines()
    lines[250] = lines[250].replace('"dur": 1', '"dur": 1 oops')  # line 251 of the file
    path = tmp_path / "broken.json"
    path.write_text("\n".join(lines))
    with pytest.raises(UserError) as err:
        read_trace(path)
    column = lines[250].index("oops") + 1
    assert str(err.value) == f"{path}: not JSON (Expecting ',' delimiter at line 251, column {column})"


@pytest.mark.parametrize("make, message", [
    (lambda text: text[: len(text) // 2], "ends before the JSON does"),
    (lambda text: text.replace("]\n}", "]\n"), "ends before the JSON does"),
    (lambda text: "42", "JSON of another shape, not a Kineto trace: no traceEvents list (found: int)"),
    (lambda text: '{"schema_version": 2, "trials": []}', "no traceEvents list (found: schema_version, trials)"),
    (lambda text: '{"traceEvents": {"ph": "X"}}', "no traceEvents list (found: traceEvents)"),
    (lambda text: "{}", "(found: an empty object)"),
    (lambda text: text + "{}", "Extra data"),
    (lambda text: "hello, not json", "not JSON (Expecting value at line 1, column 1)"),
    (lambda text: text.replace('"ts": 300', '"ts": "soon"'), "a malformed trace event (at line 303: ValueError"),
], ids=["cut in half", "no closing brace", "number", "other object", "events not a list", "empty object",
        "extra data", "text", "bad timestamp"])
def test_bad_input_is_one_line_naming_the_file(make: Any, message: str, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(make(_lines_trace()))
    with pytest.raises(UserError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value) and "\n" not in str(err.value)


def test_truncated_and_invalid_gzip(tmp_path: Path) -> None:
    data = gzip.compress(_lines_trace().encode())
    cut, plain, empty = tmp_path / "cut.json.gz", tmp_path / "plain.json.gz", tmp_path / "empty.json"
    cut.write_bytes(data[: len(data) // 2])
    plain.write_text(_lines_trace())
    empty.write_bytes(b"")
    for path, message in [(cut, "a truncated gzip file"), (plain, "not a valid gzip file"), (empty, "an empty file")]:
        with pytest.raises(UserError, match=message):
            read_trace(path)


# ------------------------------------------------------------------------------------------------ memory


def test_memory_held_while_reading_is_a_fraction_of_the_file(tmp_path: Path) -> None:
    """tracemalloc's peak (deterministic for one input) while streaming a 32 MB LLM-shaped trace: under 0.75 of the
    file. json.load alone peaks at about 4 times the file (87 MB for a 21 MB one), so the old reader fails this."""
    path = tmp_path / "big.json"
    size = write_trace(path, target_bytes=32 << 20, seed=2, world_size=8)
    tracemalloc.start()
    try:
        trace = read_trace(path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(trace.columns("device")) and len(trace.columns("cpu_ops"))
    assert peak < 0.75 * size, f"peak {peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB trace"
    assert held < 0.6 * size, f"held {held / 1e6:.0f} MB for a {size / 1e6:.0f} MB trace"


def test_a_folder_is_read_one_rank_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When a rank's file is read, no earlier rank's events are still held: only their summaries are."""
    for rank in range(3):
        write_trace(tmp_path / f"rank{rank}.json", target_bytes=1 << 20, seed=3, rank=rank, world_size=3)
    held: list[weakref.ref[Trace]] = []
    load = offline.load_rank

    def watched(file: Path) -> Any:
        assert all(ref() is None for ref in held), "an earlier rank's events are still in memory"
        loaded = load(file)
        held.append(weakref.ref(loaded.trace))
        return loaded

    monkeypatch.setattr(offline, "load_rank", watched)
    results = offline.trace_results(tmp_path)
    dist = results.trials[0].metrics.distributed
    assert len(held) == 3 and dist is not None and [r.rank for r in dist.ranks] == [0, 1, 2]
    assert [dist.communication.rank] == [dist.slowest_rank]


def test_the_trace_size_is_recorded_and_reported() -> None:
    """TraceFacts.trace_bytes is the file's size, and the report's link to the trace says it."""
    from perfscope.report.view import build_view

    path = TRACES / "cuda" / "h100_fp32_launch_bound.json.gz"
    results = offline.trace_results(path)
    assert results.trials[0].metrics.trace_facts.trace_bytes == path.stat().st_size
    (link,) = build_view(results).traces
    assert link.label.endswith(f"({path.stat().st_size / 1024:.1f} KiB)"), link.label

"""`perfscope check` against a hostile or corrupt baseline: exit 2 with one line, within 5 s, never a traceback,
never a PASS on non-finite data; a large but valid baseline is judged in seconds."""

import json
import subprocess
import sys
import time

import pytest

from perfscope.cli import main
from perfscope.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USER
from tests.factories import make_results, make_trial


def _runs(n=3):
    trials = [make_trial("baseline" if i == 0 else f"baseline-r{i + 1}", seed=i) for i in range(n)]
    for i, t in enumerate(trials):
        t.configuration, t.repeat, t.sequence = "baseline", i + 1, i
    return make_results(trials)


@pytest.fixture
def current(tmp_path):
    return str(_runs().save(tmp_path / "current.json"))


def _doc(mutate):
    data = _runs().to_dict()
    mutate(data)
    return json.dumps(data).encode()


def _sparse(path):
    with open(path, "wb") as fh:
        fh.truncate(200 * 2**20)


HOSTILE = {
    "nan mfu": lambda: _doc(lambda d: d["trials"][0]["metrics"].__setitem__("mfu", float("nan"))),
    "infinite wall": lambda: _doc(lambda d: d["trials"][1]["metrics"].__setitem__("wall_s", float("inf"))),
    "1e308 step time": lambda: _doc(lambda d: d["trials"][0]["metrics"].__setitem__("step_times_s", [1e308])),
    "negative samples/s": lambda: _doc(lambda d: d["trials"][0]["metrics"].__setitem__("samples_per_s", -5.0)),
    "wrong type": lambda: _doc(lambda d: d["trials"][0]["metrics"].__setitem__("windows", "lots")),
    "not utf-8": lambda: b'{"schema_version": 2, "notes": ["\xff\xfe"]}',
    "10,000-deep nesting": lambda: b"[" * 10_000 + b"]" * 10_000,
    "deep inside a valid file": lambda: _doc(lambda d: d["workload"]["declared"].__setitem__("x", json.loads("[" * 900 + "]" * 900))),
    "truncated": lambda: _doc(lambda d: None)[:-200],
    "top-level list": lambda: b"[1, 2, 3]",
    "200 MB": None,
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_baseline_exits_2_with_one_line_within_5_s(tmp_path, current, capsys, case):
    baseline = tmp_path / "baseline.json"
    if HOSTILE[case] is None:
        _sparse(baseline)
    else:
        baseline.write_bytes(HOSTILE[case]())
    start = time.process_time()  # work, not wall time: this process's CPU, which load cannot inflate
    code = main(["check", current, "--baseline", str(baseline)])
    elapsed = time.process_time() - start
    captured = capsys.readouterr()
    assert code == EXIT_USER, captured
    assert elapsed < 5
    assert "PASS" not in captured.out and "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"perfscope: error: {baseline}: ")


def test_a_hostile_baseline_in_a_real_process_exits_2_without_a_traceback(tmp_path, current):
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(b"[" * 10_000 + b"]" * 10_000)
    out = subprocess.run([sys.executable, "-m", "perfscope", "check", current, "--baseline", str(baseline)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == EXIT_USER
    assert out.stderr.count("\n") == 1 and "nested deeper" in out.stderr and "Traceback" not in out.stderr


def test_a_large_valid_baseline_is_judged_in_seconds(tmp_path, current, capsys):
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(_doc(lambda d: [t["metrics"].__setitem__("step_times_s", [0.1] * 200_000) for t in d["trials"]]))
    start = time.process_time()  # work, not wall time: this process's CPU, which load cannot inflate
    code = main(["check", current, "--baseline", str(baseline)])
    elapsed = time.process_time() - start
    assert code in (EXIT_OK, EXIT_REGRESSION, EXIT_INCONCLUSIVE), capsys.readouterr()
    assert elapsed < 5
    assert "Traceback" not in capsys.readouterr().err

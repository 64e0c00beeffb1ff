import json
import math
from pathlib import Path

import pytest

from perfscope.results import SCHEMA_VERSION, Results, ResultsError, write_json
from perfscope.results.migrate import NOTE_V1
from tests.factories import make_results, make_trial


def test_round_trip_preserves_everything(tmp_path):
    results = make_results([make_trial("baseline"), make_trial("oom", status="oom")])
    path = results.save(tmp_path / "results.json")
    loaded = Results.load(path)
    assert loaded == results


def test_non_finite_numbers_become_null(tmp_path):
    trial = make_trial()
    trial.metrics.mfu = math.nan
    trial.metrics.hfu = math.inf
    path = make_results([trial]).save(tmp_path / "r.json")
    data = json.loads(path.read_text())  # would fail on bare NaN under strict parsers
    assert data["trials"][0]["metrics"]["mfu"] is None
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def test_wrong_schema_version_is_refused(tmp_path):
    data = make_results().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="schema_version"):
        Results.load(tmp_path / "r.json")


def test_corrupt_and_missing_files_give_clear_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ResultsError, match="not valid JSON"):
        Results.load(tmp_path / "bad.json")
    with pytest.raises(ResultsError, match="no such file"):
        Results.load(tmp_path / "missing.json")


def test_type_mismatch_is_a_schema_error(tmp_path):
    data = make_results().to_dict()
    data["trials"][0]["metrics"]["steps"] = "many"
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"trials\[0\]\.metrics\.steps: expected an integer"):
        Results.load(tmp_path / "r.json")


def test_atomic_write_keeps_old_file_when_serialization_fails(tmp_path):
    path = tmp_path / "r.json"
    write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


# ------------------------------------------------------------------------------ schema 1 files

SCHEMA1 = Path(__file__).parent / "data" / "schema1" / "results.json"


def test_a_schema1_file_is_read_with_throughput_recomputed_from_wall_time():
    """A file written by perfscope 0.1 (median-step throughput) loads as schema 2: work / wall time."""
    old = json.loads(SCHEMA1.read_text())
    assert old["schema_version"] == 1
    results = Results.load(SCHEMA1)
    assert results.schema_version == SCHEMA_VERSION
    for raw, trial in zip(old["trials"], results.trials):
        assert trial.configuration == raw["name"]
        if raw["status"] != "ok":
            assert trial.metrics is None
            continue
        m, steps = trial.metrics, raw["metrics"]["step_times_s"]
        assert m.wall_s == pytest.approx(sum(steps))
        assert m.samples_per_s == pytest.approx(raw["metrics"]["samples_per_step"] * len(steps) / sum(steps))
        assert m.samples_per_s != pytest.approx(raw["metrics"]["samples_per_s"], rel=1e-9)  # not the median's
        assert m.typical_step.median == pytest.approx(raw["metrics"]["step_time_s"]["median"])
    assert NOTE_V1 in results.notes
    round_trip = Results.from_dict(json.loads(json.dumps(results.to_dict())))
    assert round_trip.trials[0].metrics.samples_per_s == results.trials[0].metrics.samples_per_s

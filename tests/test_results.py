import json
import math
from pathlib import Path

import pytest

from perfscope.results import (
    SCHEMA_VERSION,
    LayoutRow,
    LayoutTable,
    NumericsCheck,
    Results,
    ResultsError,
    migrate,
    write_json,
)
from perfscope.results.messages import legacy, msg
from perfscope.results.migrate import NOTE_V1
from tests.factories import make_full_results, make_results, make_trial


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


def test_a_current_file_is_returned_as_it_is_without_a_walk(monkeypatch):
    """Only an older file pays for its upgrade: a document at the current schema is not walked at all."""
    assert migrate.LATEST == SCHEMA_VERSION
    data = make_full_results().to_dict()

    def walked(*args, **kwargs):
        raise AssertionError("a current document was walked")

    for step in ("_prose_to_messages", "_reasons_to_messages", "_upper_bounds", "_typed_trace_facts"):
        monkeypatch.setattr(migrate, step, walked)
    assert migrate.upgrade(data) is data


def test_a_schema3_file_keeps_its_prose_reasons_and_flop_notes_as_legacy_messages():
    """Schema 3 wrote a knob's reason ("; "-joined), a layout row's, the numerics guard's, the FLOP notes, why a
    setting was not applied, why the sweep stopped early and why TP does not apply and a trace capture's note as prose."""
    results = make_full_results()
    results.layouts = LayoutTable(world_size=2, rows=[LayoutRow(layout="dp2", status="pruned", prune_reason="bubble")])
    results.trials[0].numerics = NumericsCheck(reference="baseline", method="step by step", first_step=0, last_step=3)
    old = results.to_dict()
    old["schema_version"] = 3
    knobs = old["sweep"]["knobs"]
    knobs[0]["reason"], knobs[1]["reason"] = "numerics guard: loss 2.1 vs 1.1; the fastest of 2 variants", None
    old["layouts"]["rows"][0]["reason"] = "(p − 1) / (m + p − 1) = 50% idle"
    old["trials"][0]["numerics"].update(ok=False, reason="the loss became non-finite")
    old["trials"][0]["metrics"]["flop_notes"] = ["counted on fake tensors"]
    old["trials"][0]["metrics"]["not_applied"] = {"compile": "torch.compile compiled no graph"}
    old["sweep"]["stopped_early"] = "budget of 300 s exhausted"
    old["workload"]["model"] = {"parameter_count": 1, "has_conv2d": False, "repeated_blocks": 4, "optimizer_class": "SGD",
                                "layout": {"blocks": 4, "tp_inapplicable": {"8": "n_heads = 4 heads is not divisible by tp = 8"}}}
    old["trials"][0]["metrics"]["unavailable"]["trace"] = {"code": "trace_not_captured", "params": {"notes": ["cap"]}}
    old["trials"][1]["metrics"]["unavailable"]["trace"] = {
        "code": "trace_not_captured", "params": {"notes": [{"code": "capture_said", "params": {"note": "said"}}]}}
    kept = json.dumps(old, sort_keys=True)
    loaded = Results.from_dict(old)
    assert loaded.sweep.knobs[0].reason == [legacy("numerics guard: loss 2.1 vs 1.1; the fastest of 2 variants")]
    assert loaded.sweep.knobs[1].reason == []
    assert loaded.layouts.rows[0].reason == legacy("(p − 1) / (m + p − 1) = 50% idle")
    assert loaded.trials[0].numerics.reason == legacy("the loss became non-finite")
    assert loaded.trials[0].metrics.flop_notes == [legacy("counted on fake tensors")]
    assert loaded.trials[0].metrics.not_applied == {"compile": legacy("torch.compile compiled no graph")}
    assert loaded.sweep.stopped_early == legacy("budget of 300 s exhausted")
    assert loaded.workload.model.layout.tp_inapplicable == {"8": legacy("n_heads = 4 heads is not divisible by tp = 8")}
    assert [t.metrics.unavailable["trace"] for t in loaded.trials[:2]] == [
        msg("trace_not_captured", notes=[legacy("cap")]), msg("trace_not_captured", notes=[legacy("said")])]
    assert json.dumps(old, sort_keys=True) == kept  # upgraded on a copy
    assert Results.from_dict(loaded.to_dict()) == loaded  # and written back at schema 4


@pytest.mark.parametrize(("code", "params", "now"), [
    ("contended_budget", {}, {"budget": True}),
    ("contended_persisted", {"runs": 3}, {"runs": 3}),
    ("contended_given_up", {"measurements": 4}, {"gave_up_after": 4}),
])
def test_a_schema3_exclusion_under_an_old_contended_code_is_one_contended_run(code, params, now):
    """Schema 3 said how a contended run ended by its code; schema 4 by `contended`'s parameters: still contended."""
    old = make_results([make_trial("a"), make_trial("a-r2", seed=1)]).to_dict()
    old["schema_version"] = 3
    old["trials"][0]["excluded"] = {"code": code, "params": {"why": ["other processes used 1.4 cores"], **params}}
    trial = Results.from_dict(old).trials[0]
    assert trial.excluded == msg("contended", why=["other processes used 1.4 cores"], **now) and trial.contended

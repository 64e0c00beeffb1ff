"""Every message perfscope records has words, and every wording gets the parameters it names.

The calls are read from the source (`msg("code", name=...)` anywhere under perfscope/), so a new code without a
template, a template naming a parameter no call supplies, or a template nothing writes, fails here.
"""

from __future__ import annotations

import ast
import inspect
import json
import string
from pathlib import Path

import pytest

import perfscope
from perfscope.results import Results, to_jsonable
from perfscope.results.messages import Message, legacy, msg
from perfscope.wording import WORDING, words

ROOT = Path(perfscope.__file__).parent


def _calls() -> list[tuple[str, str, set[str]]]:
    """(where, code, keyword names) of every msg(...) call in perfscope/."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "msg":
                where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), f"{where}: a literal code"
                assert all(k.arg for k in node.keywords), f"{where}: parameters by name, no **splat"
                found.append((where, first.value, {k.arg for k in node.keywords if k.arg}))
    return found


def _params(code: str) -> tuple[set[str], set[str]]:
    """(required, allowed) parameters of ``code``'s wording."""
    template = WORDING[code]
    if isinstance(template, str):
        names = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f}
        return names, names
    signature = inspect.signature(template).parameters.values()
    return ({p.name for p in signature if p.default is inspect.Parameter.empty}, {p.name for p in signature})


CALLS = _calls()


def test_the_scan_sees_the_calls() -> None:
    assert {"persistent_load", "stack_failed"} <= {code for _, code, _ in CALLS}


@pytest.mark.parametrize(("where", "code", "given"), CALLS, ids=[w for w, _, _ in CALLS])
def test_every_message_has_a_wording_that_gets_its_parameters(where: str, code: str, given: set[str]) -> None:
    assert code in WORDING, f"{where}: no wording for {code!r} in perfscope/wording/"
    required, allowed = _params(code)
    assert required <= given <= allowed, f"{where}: {code!r} given {sorted(given)}, its wording takes {sorted(allowed)}"


def test_every_wording_is_written_somewhere() -> None:
    written = {code for _, code, _ in CALLS} | {legacy("").code}
    assert set(WORDING) - written == set()


def test_a_message_round_trips_through_results_json_with_nested_messages() -> None:
    inner = msg("legacy", text="NVMLError: not supported")
    outer = Message("stack_failed", {"knobs": ["tf32", "compile"], "reason": inner, "joining": "compile", "trial": "s"})
    data = {"schema_version": 3, "environment": {"device_type": "cpu", "device_name": "cpu"},
            "workload": {"path": "w.py", "sha256": "0", "name": "w"}, "warnings": [to_jsonable(outer)]}
    results = Results.from_dict(Results.from_dict(data).to_dict())
    assert results.warnings == [outer] and isinstance(results.warnings[0].params["reason"], Message)
    assert words(outer) == ("tf32 + compile together failed (NVMLError: not supported), though compile alone and the "
                            "stack without it ran: see the failed trial s")


def test_a_schema2_file_keeps_its_prose_as_legacy_messages() -> None:
    data = {"schema_version": 2, "environment": {"device_type": "cpu", "device_name": "cpu"},
            "workload": {"path": "w.py", "sha256": "0", "name": "w"},
            "warnings": ["other load on this machine persisted through 3 run(s) ...", "something else"]}
    results = Results.from_dict(data)
    assert [w.code for w in results.warnings] == ["persistent_load_v2", "legacy"]
    assert [words(w) for w in results.warnings] == data["warnings"]


def test_a_recorded_schema2_file_keeps_every_reason_word_for_word() -> None:
    """A real schema-2 results file (tests/data/reports): every `unavailable` reason, at any depth, loads as a legacy
    message whose words are the prose the file holds."""
    path = Path(__file__).parent / "data" / "reports" / "quick_start_cpu.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    assert old["schema_version"] == 2
    results = Results.load(path)
    before, after = _reasons(old), _reasons(to_jsonable(results))
    assert len(before) > 100 and set(before) == set(after)
    assert all(after[k] == {"code": "legacy", "params": {"text": text}} for k, text in before.items())
    assert words(results.environment.unavailable["driver_version"]) == old["environment"]["unavailable"]["driver_version"]


def _reasons(node: object, where: str = "") -> dict[str, object]:
    """Every `unavailable` entry of a results document, by its JSON path."""
    found: dict[str, object] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "unavailable" and isinstance(value, dict):
                found.update({f"{where}.unavailable.{k}": v for k, v in value.items()})
            else:
                found.update(_reasons(value, f"{where}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.update(_reasons(value, f"{where}[{i}]"))
    return found


def test_a_recorded_schema2_file_keeps_its_exclusions_contention_and_notes_word_for_word() -> None:
    """tests/data/reports/data_bound_cpu.json (schema 2, measured on a loaded machine): each exclusion is a contended
    one by its code, and every exclusion, window reason and note reads as the file wrote it."""
    path = Path(__file__).parent / "data" / "reports" / "data_bound_cpu.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    results = Results.load(path)
    excluded = {t["name"]: t["excluded"] for t in old["trials"] if t.get("excluded")}
    assert excluded and all(results.trial(name).contended for name in excluded)  # type: ignore[union-attr]
    assert {name: words(results.trial(name).excluded) for name in excluded} == excluded  # type: ignore[arg-type,union-attr]
    reasons = [w["contention"]["reason"] for t in old["trials"] for w in (t.get("metrics") or {}).get("windows") or []
               if (w.get("contention") or {}).get("reason")]
    loaded = [words(w.contention.reason) for t in results.trials if t.metrics for w in t.metrics.windows
              if w.contention and w.contention.reason]
    assert reasons and loaded == reasons
    assert [words(n) for n in results.notes] == old["notes"]
    assert [words(n) for n in results.sweep.notes] == old["sweep"]["notes"]  # type: ignore[union-attr]


def test_an_early_schema3_file_with_prose_notes_and_exclusions_loads_without_changing_the_callers_data() -> None:
    """Schema 3 first held messages only in warnings, reasons and flags: its notes and exclusions were still prose."""
    fresh = Results.load(Path(__file__).parent / "data" / "reports" / "data_bound_cpu.json").to_dict()
    fresh["schema_version"] = 3
    fresh["notes"] = ["a note in words"]
    fresh["trials"][0]["excluded"] = "contended: other processes used 1.00 of 2 CPU cores"
    kept = json.dumps(fresh, sort_keys=True)
    results = Results.from_dict(fresh)
    assert results.notes == [legacy("a note in words")] and results.trials[0].contended
    assert json.dumps(fresh, sort_keys=True) == kept  # upgraded on a copy


def test_a_file_whose_hooks_notes_were_kept_as_text_reads_them_word_for_word() -> None:
    """Before the hooks' notes had codes they were stored as code "text" (and, older still, as plain strings): both
    still load and read as written, beside today's coded notes."""
    fresh = Results.load(Path(__file__).parent / "data" / "reports" / "data_bound_cpu.json").to_dict()
    fresh["notes"] = [{"code": "text", "params": {"text": "trace unavailable"}},
                      to_jsonable(msg("samples_per_step_varied", low=4, high=8))]
    results = Results.from_dict(fresh)
    assert [n.code for n in results.notes] == ["text", "samples_per_step_varied"]
    assert [words(n) for n in results.notes] == [
        "trace unavailable", "samples per step varied (4..8): samples/s counts every step's own samples"]


def test_a_recorded_schema2_file_keeps_its_semantics_changes_word_for_word_and_numerics_by_code() -> None:
    """A knob's changes_semantics and a finding's caveats were prose: a numerics one reads back as the code "numerics"
    around the rest (perfscope.ranking decides on the code), any other as legacy; both word for word."""
    path = Path(__file__).parent / "data" / "reports" / "quick_start_cpu.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    results = Results.load(path)
    assert results.sweep is not None and results.findings is not None
    for before, after in [*zip(old["sweep"]["knobs"], results.sweep.knobs), *zip(old["findings"], results.findings)]:
        written = before.get("changes_semantics", before.get("caveats"))
        typed = after.changes_semantics if "changes_semantics" in before else after.caveats  # type: ignore[union-attr]
        assert [words(m) for m in typed] == written
        assert [m.code for m in typed] == ["numerics" if s.startswith("numerics: ") else "legacy" for s in written]
    amp = next(k for k in results.sweep.knobs if k.knob == "amp_bf16")
    assert [m.code for m in amp.changes_semantics] == ["numerics"]
    # a knob's reason was one string (schema 4: a list of messages): one legacy message, word for word
    reasons = [[words(m) for m in k.reason] for k in results.sweep.knobs]
    assert reasons == [[k["reason"]] if k.get("reason") else [] for k in old["sweep"]["knobs"]] and any(reasons)


def test_a_global_batch_change_words_its_learning_rate_factors() -> None:
    one = words(msg("global_batch", before=8, after=32))
    assert one.startswith("global batch 8 → 32: ") and "linear ×4 " in one and "√ ×2.00" in one
    ranks = words(msg("global_batch", before=16, after=64, parts_before="8 × 1 × 2", parts_after="8 × 4 × 2"))
    assert ranks.startswith("global batch 16 → 64 (micro-batch × accumulation × ranks: 8 × 1 × 2 → 8 × 4 × 2): ")
    assert words(msg("numerics", change=msg("tf32_matmuls"))) == "numerics: fp32 matmuls with a 10-bit mantissa (TF32)"


def test_the_one_contended_code_says_how_each_run_ended() -> None:
    """One code, `contended`: whether the run was measured again is in its parameters (results.CONTENDED holds one
    code, so a new ending cannot slip out of Trial.contended)."""
    why = [msg("other_processes_busy", cores=1.0, cpus=2, beyond_quota=0)]
    load = "contended: other processes used 1.00 cores of the 2 CPUs this run may use"
    assert words(msg("contended", why=why)) == load
    assert words(msg("contended", why=why, runs=3)) == f"{load} (persisted through 3 runs)"
    assert words(msg("contended", why=why, gave_up_after=3)) == f"{load} (persisted through 3 measurements: not measured again)"
    assert words(msg("contended", why=why, budget=True)) == f"{load}; not measured again: the budget would not allow it"

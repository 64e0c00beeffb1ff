"""Across fresh trial processes, as CI runs them: identical code gives 5 of 5 identical fingerprints, and a
per-step `.item()` fails `perfscope check --fail-on-structure sync`, named at its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfscope.cli import main
from perfscope.results import Results
from perfscope.results.serde import to_jsonable
from tests.test_fingerprint import ITEM_LINE, WORKLOAD

ANALYZE = ["--device", "cpu", "--steps", "10", "--warmup", "2", "--peak-tflops", "1", "--no-sweep", "--no-trace"]
VARIANT = "PERFSCOPE_TEST_VARIANT"


def _fingerprints(path: Path) -> list[str]:
    return [json.dumps(to_jsonable(t.metrics.fingerprint), sort_keys=True)
            for t in Results.load(path).trials if t.ok and t.metrics is not None]


@pytest.mark.slow
def test_identical_code_is_identical_across_processes_and_a_new_sync_fails_the_structural_gate(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(VARIANT, raising=False)
    monkeypatch.chdir(Path(__file__).parent.parent)  # call sites are shown relative to the working directory
    assert main(["analyze", str(WORKLOAD), "--out", str(tmp_path / "base"), *ANALYZE, "--repeat", "3"]) == 0
    assert main(["analyze", str(WORKLOAD), "--out", str(tmp_path / "same"), *ANALYZE, "--repeat", "2"]) == 0
    prints = _fingerprints(tmp_path / "base" / "results.json") + _fingerprints(tmp_path / "same" / "results.json")
    # contended runs are measured again: every run counts here (the fingerprint does not depend on the load)
    assert len(prints) >= 5 and len(set(prints)) == 1 and "null" not in prints

    baseline = tmp_path / "base" / "results.json"  # the gate reads any results file as its baseline
    every_kind = "sync,flops,dtype,graph-breaks,recompiles,ops,copies,memory"
    gate = ["--baseline", str(baseline), "--metric", "samples_per_s", "--max-drop", "90%", "--fail-on-structure", every_kind]
    capsys.readouterr()
    # 3: too few runs to time; 2: a loaded machine left no timing evidence (the structure is compared regardless)
    assert main(["check", str(tmp_path / "same" / "results.json"), *gate]) in (0, 2, 3)
    assert "no structural change" in "".join(capsys.readouterr())

    monkeypatch.setenv(VARIANT, "item")
    assert main(["analyze", str(WORKLOAD), "--out", str(tmp_path / "item"), *ANALYZE]) == 0
    junit = tmp_path / "gate.xml"
    assert main(["check", str(tmp_path / "item" / "results.json"), *gate, "--junit", str(junit)]) == 1
    out = "".join(capsys.readouterr())
    words = f"+1 host sync per step: aten::_local_scalar_dense (.item()) at tests/workloads/structure_variants.py:{ITEM_LINE}"
    assert f"[FAIL] {words}" in out and "REGRESSION" in out
    assert words in junit.read_text()

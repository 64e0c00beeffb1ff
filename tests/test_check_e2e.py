"""End to end: record a baseline with the real tiny CPU example, gate a regressed run and the same code.

The regression is switched on by an environment variable read inside the workload's loss, so both runs use
byte-identical files (same workload sha256) and the gate compares them without --allow-mismatch. Trial
processes inherit the environment, which is how the variable reaches the measured loop.

What is decided here is load-immune, so the test has one outcome on any machine: the regression is a host
sync in every micro-batch (`float(loss)`, a `.item()`), which the step's structural fingerprint counts
exactly, and the gate runs with `--fail-on-structure sync`. A timing regression (the wall clock of runs) is
not decided here: on a shared CPU its honest outcome is sometimes "inconclusive" (neighbours make every run
contended, and contended runs are not evidence). That end to end lives in benchmarks/check_e2e.py; the timing
decision itself is tested on synthetic runs in tests/test_check.py.
"""

import shutil
from pathlib import Path

import pytest

from perfscope.check import GateOptions, run_gate
from perfscope.check.baseline import BaselineHistory
from perfscope.check.structure import parse_structure_gates
from perfscope.cli import main
from perfscope.errors import EXIT_REGRESSION
from perfscope.results import Results

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_transformer.py"
REGRESS_VAR = "PERFSCOPE_E2E_REGRESS"
REGRESSION_HOOK = f'''

# --- added by tests/test_check_e2e.py: a deliberate, switchable host sync inside the loss ---
import os as _os

_original_loss = loss


def loss(model, batch):
    out = _original_loss(model, batch)
    if _os.environ.get("{REGRESS_VAR}") == "1":
        float(out.detach())  # a debug print's .item(): one host sync per micro-batch
    return out
'''

ANALYZE = ["--device", "cpu", "--steps", "4", "--warmup", "1", "--peak-tflops", "1", "--no-sweep", "--no-trace"]
GATE = ["--max-drop", "70%", "--fail-on-structure", "sync"]


@pytest.fixture
def workload(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(REGRESS_VAR, raising=False)
    path = tmp_path / "tiny_transformer_regressable.py"
    shutil.copyfile(EXAMPLE, path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(REGRESSION_HOOK)
    return path


def analyze(workload: Path, out: Path) -> Path:
    assert main(["analyze", str(workload), "--out", str(out), *ANALYZE]) == 0
    results = Results.load(out / "results.json")
    baseline = results.trial("baseline")
    assert baseline is not None and baseline.ok, baseline.error if baseline else results.trials
    assert baseline.metrics is not None and baseline.metrics.fingerprint is not None  # what the gate decides on
    return out / "results.json"


@pytest.mark.slow
def test_a_regressed_workload_is_caught_and_the_same_workload_is_not(workload, tmp_path, monkeypatch, capsys):
    # The analysis's own results.json as the baseline: `baseline save` rightly refuses a file whose runs were all
    # contended (no timing evidence), which a loaded machine produces; the structure needs no timing evidence.
    baseline = analyze(workload, tmp_path / "base")

    monkeypatch.setenv(REGRESS_VAR, "1")
    regressed = analyze(workload, tmp_path / "regressed")
    capsys.readouterr()
    assert main(["check", str(regressed), "--baseline", str(baseline), *GATE]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "sync" in out, out

    monkeypatch.setenv(REGRESS_VAR, "0")
    same = analyze(workload, tmp_path / "same")
    options = GateOptions(metrics=("mfu",), max_drop=0.7, fail_on_structure=parse_structure_gates("sync"))
    report = run_gate([Results.load(same)], BaselineHistory.load(baseline), options)
    assert report.structure is not None and report.structure.compared, report.structure
    assert [c.message for c in report.structure.changes if c.kind == "sync"] == []
    assert not report.structure_failed  # the timing verdict of the same code is benchmarks/check_e2e.py's question

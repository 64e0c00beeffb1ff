"""End to end: analyze the real tiny CPU example twice and gate; a deliberately slowed run is caught.

The slowdown is switched on by an environment variable read inside the workload's loss, so both runs
use byte-identical files (same workload sha256) and the gate compares them without --allow-mismatch.
Trial processes inherit the environment, which is how the variable reaches the measured loop.
"""

import shutil
from pathlib import Path

import pytest

from perfscope.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny_transformer.py"
SLOWDOWN_VAR = "PERFSCOPE_E2E_SLOWDOWN_S"
SLOWDOWN_HOOK = f'''

# --- added by tests/test_check_e2e.py: a deliberate, switchable slowdown inside the loss ---
import os as _os
import time as _time

_original_loss = loss


def loss(model, batch):
    _time.sleep(float(_os.environ.get("{SLOWDOWN_VAR}", "0")))
    return _original_loss(model, batch)
'''

# Per-step samples see noise within a run, not drift between runs, and this CPU is shared: neighbours
# have made the *same* code 1.6-2x slower for a whole run here. So the gate runs with a tolerance wider
# than that drift (70%), and the deliberate slowdown (400 ms of sleep on a ~25 ms step, a >90% MFU drop)
# stays far past it even if a neighbour slows the baseline run 3x. One thread per trial removes most
# of the contention between trial threads and the neighbours.
ANALYZE = ["--device", "cpu", "--steps", "12", "--warmup", "2", "--peak-tflops", "1", "--no-sweep", "--no-trace"]  # what a CI job runs
GATE = ["--max-drop", "70%"]
SLOWDOWN_S = "0.4"
ATTEMPTS = 3


@pytest.fixture
def workload(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(SLOWDOWN_VAR, raising=False)
    path = tmp_path / "tiny_transformer_slowable.py"
    shutil.copyfile(EXAMPLE, path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(SLOWDOWN_HOOK)
    return path


def analyze(workload: Path, out: Path) -> Path:
    assert main(["analyze", str(workload), "--out", str(out), *ANALYZE]) == 0
    return out / "results.json"


@pytest.mark.slow
def test_a_slowed_workload_is_caught_and_the_same_workload_is_not(workload, tmp_path, monkeypatch, capsys):
    baseline = analyze(workload, tmp_path / "baseline")
    assert main(["baseline", "save", str(baseline), "--to", str(tmp_path / "perfscope-baseline.json")]) == 0
    baseline = tmp_path / "perfscope-baseline.json"

    monkeypatch.setenv(SLOWDOWN_VAR, SLOWDOWN_S)
    slowed = analyze(workload, tmp_path / "slowed")
    capsys.readouterr()
    assert main(["check", str(slowed), "--baseline", str(baseline), *GATE]) == 1
    assert "REGRESSION" in capsys.readouterr().out

    # Same code again: the gate must not call it a regression. A neighbour can still slow one whole run
    # beyond any tolerance (drift the per-step samples cannot see), so a flagged run is measured again;
    # a gate that flags the same code every time fails this test.
    monkeypatch.setenv(SLOWDOWN_VAR, "0")
    codes = []
    for attempt in range(ATTEMPTS):
        same = analyze(workload, tmp_path / f"same{attempt}")
        codes.append(main(["check", str(same), "--baseline", str(baseline), *GATE]))
        if codes[-1] in (0, 3):
            break
    assert codes[-1] in (0, 3), (codes, capsys.readouterr().out)

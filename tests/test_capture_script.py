"""benchmarks/capture_cuda_fixtures.py stays runnable: run on CPU into a tmp dir, it writes what it says."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "capture_cuda_fixtures.py"


@pytest.mark.slow
def test_the_capture_script_writes_a_trace_and_its_facts_per_scenario(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--device", "cpu",
                           "--only", "mlp_fp32_pageable,item_sync"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("mlp_fp32_pageable", "item_sync"):
        trace = tmp_path / name / "trace" / "rank0.json.gz"  # perfscope.trace.export's name for rank 0
        assert f"{name}: exit 0, {name}/trace/rank0.json.gz" in proc.stdout
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        assert any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events)
        facts = json.loads((tmp_path / name / "facts.json").read_text())
        assert facts["trace"] == str(trace) and facts["facts"] is not None and "trace" not in facts["unavailable"]
        assert facts["config"]["device"] == "cpu" and facts["config"]["capture_trace"] is True


def test_an_unknown_scenario_is_a_user_error(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--device", "cpu", "--only", "nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown scenario(s) nope" in proc.stderr and not any(tmp_path.iterdir())

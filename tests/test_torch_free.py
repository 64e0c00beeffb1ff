"""The commands that only read files never import torch (issue 27): `perfscope trace`, `perfscope report`, `perfscope check`.

Why it matters: importing torch costs ~1.5 s and ~300 MB of RSS, a third of the 1 GB budget for reading a 2 GB trace,
and a trace or a results.json is read on machines (a laptop, a CI runner) that need not have a working torch at all.

Each command runs in a fresh interpreter through a tiny wrapper that calls the CLI's main() and then records which
torch modules are loaded: a function-level `import torch` anywhere on the path (a rule, a report section, a knob's
words) fails the test, which a static import check would miss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(__file__).parent / "data" / "traces"
CUDA_FP32 = TRACES / "cuda" / "h100_fp32_launch_bound.json.gz"  # PS102 (TF32) fires: its code change reads the torch API
GLOO_DDP = TRACES / "gloo" / "ddp"  # two ranks: communication and the straggler test
ANALYZED = Path(__file__).parent / "data" / "reports" / "data_bound_cpu.json"  # an `analyze` run: the knobs' words

WRAPPER = """
import json, sys
record = sys.argv.pop(1)
from perfscope.cli import main
rc = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
with open(record, "w") as fh:
    json.dump({"rc": rc, "torch": loaded[:10]}, fh)
"""


def run_cli(tmp_path: Path, *argv: str | Path) -> dict:
    """Run `perfscope ARGV` in a fresh interpreter; {"rc": exit code, "torch": torch modules loaded at the end}."""
    record = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(record), *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert record.is_file(), f"the command did not finish: {proc.stderr[-3000:]}"
    result = json.loads(record.read_text())
    assert result["rc"] == 0, proc.stderr[-3000:]
    assert "failed" not in proc.stderr, proc.stderr[-3000:]  # a rule or the report silently degraded
    return result


@pytest.mark.parametrize("trace", [CUDA_FP32, GLOO_DDP], ids=["cuda-fp32", "gloo-ddp-folder"])
def test_perfscope_trace_imports_no_torch(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(tmp_path, "trace", trace, "--out", out)
    assert result["torch"] == []
    assert {p.name for p in out.iterdir()} >= {"results.json", "report.html", "report.md"}
    findings = {f["rule_id"] for f in json.loads((out / "results.json").read_text())["findings"]}
    if trace == CUDA_FP32:
        assert "PS102" in findings  # the TF32 rule ran and printed its code change without probing torch


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_perfscope_report_imports_no_torch(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    assert run_cli(tmp_path, "report", ANALYZED, "--format", fmt, "-o", out)["torch"] == []
    assert out.stat().st_size > 0


def test_perfscope_check_imports_no_torch(tmp_path: Path) -> None:
    assert run_cli(tmp_path, "check", ANALYZED, "--baseline", ANALYZED, "--metric", "samples_per_s",
                   "--between-session", "0%", "--max-drop", "50%")["torch"] == []  # the same file: a pass


def test_import_perfscope_is_torch_free_until_profiler_is_used() -> None:
    """`import perfscope` loads Profiler and Workload on first use (both import torch), and the check can fail: once
    perfscope.Profiler is touched, torch is in sys.modules."""
    code = "import sys, perfscope; before = 'torch' in sys.modules; perfscope.Profiler; print(before, 'torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_tf32_advice_without_torch_agrees_with_the_probe() -> None:
    """A process without torch picks the TF32 setter from the installed torch's version (no probe); on the installed
    torch that is the setter the feature probe picks once torch is imported."""
    code = ("import sys; from perfscope.tf32_api import tf32_api, probe_installed_torch; unprobed = tf32_api(); "
            "assert 'torch' not in sys.modules; import torch; print(unprobed == probe_installed_torch() == tf32_api())")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"

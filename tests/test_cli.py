"""The CLI's surface: --help text and exit codes are pinned (CI scripts depend on them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.cli import build_parser, main

WORKLOADS = Path(__file__).parent / "workloads"


def test_top_level_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("analyze", "report", "check", "baseline", "rules"):
        assert command in out


def test_analyze_help_pins_the_options():
    help_text = build_parser()._subparsers._group_actions[0].choices["analyze"].format_help()
    for option in ("--device", "--steps", "--warmup", "--batch-size", "--out", "--trial-timeout", "--peak-tflops", "--resume",
                   "--no-sweep", "--budget", "--only", "--skip", "--no-trace"):
        assert option in help_text


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "perfscope", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("perfscope ")


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "x.py", "--steps", "0"])
    assert exc.value.code == 2


def test_cuda_requested_without_cuda_is_a_user_error(capsys, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["analyze", str(WORKLOADS / "mlp.py"), "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.slow
def test_every_trial_failing_exits_1_and_keeps_the_record(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSCOPE_TEST_FAILURE", "error")
    code = main(["analyze", str(WORKLOADS / "misbehaving.py"), "--device", "cpu", "--out", str(tmp_path), "--steps", "3", "--warmup", "1"])
    captured = capsys.readouterr()
    assert code == 1
    assert "every run failed" in captured.err
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["trials"][0]["status"] == "error"
    assert "shapes do not match" in data["trials"][0]["error"]


@pytest.mark.slow
def test_the_analyze_process_never_builds_the_model(tmp_path, monkeypatch):
    """A 70B model built in the parent would cost its memory for the whole sweep: only trial processes build it."""
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("PERFSCOPE_TEST_PID_DIR", str(pids))
    code = main(["analyze", str(WORKLOADS / "pid_recorder.py"), "--device", "cpu", "--out", str(tmp_path / "out"),
                 "--no-sweep", "--steps", "3", "--warmup", "1"])
    assert code == 0
    builders = {int(p.stem) for p in pids.glob("*.pid")}
    assert builders and os.getpid() not in builders

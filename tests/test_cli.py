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


# ------------------------------------------------------------------------- flags and output paths (issue 15)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "1e400", "lots"])
def test_peak_tflops_must_be_finite_and_positive(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "x.py", "--peak-tflops", value])
    assert exc.value.code == 2
    assert "--peak-tflops" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--trial-timeout", "--budget", "--min-window"])
def test_durations_must_be_finite(capsys, flag):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "x.py", flag, "inf"])
    assert exc.value.code == 2


def test_analyze_options_refuse_a_non_finite_peak_from_python():
    from perfscope.analyze import AnalyzeOptions
    from perfscope.errors import UserError

    with pytest.raises(UserError, match="peak_tflops"):
        AnalyzeOptions(workload_path=Path("x.py"), peak_tflops=float("inf"))


def test_unknown_only_is_refused_even_without_a_sweep_before_the_workload_runs(capsys, tmp_path):
    code = main(["analyze", str(WORKLOADS / "broken_import.py"), "--only", "bogus", "--no-sweep", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown knob id(s) bogus" in err
    assert "a_module_that_does_not_exist" not in err  # the user's file was never imported
    assert not (tmp_path / "o").exists()


@pytest.fixture
def results_file(tmp_path):
    from tests.factories import make_results

    return str(make_results().save(tmp_path / "results.json"))


def test_report_md_without_output_prints_to_stdout(results_file, capsys, tmp_path):
    assert main(["report", results_file, "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#") and "baseline" in out
    assert not (tmp_path / "report.md").exists()


def test_report_dash_is_stdout_not_a_file_named_dash(results_file, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", results_file, "--format", "md", "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("#")
    assert not (tmp_path / "-").exists()


def test_report_to_an_unusable_path_exits_2(results_file, capsys, tmp_path):
    assert main(["report", results_file, "-o", str(tmp_path / "results.json" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "not a folder" in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--junit", "--markdown"])
def test_check_outputs_are_checked_before_the_verdict(results_file, capsys, tmp_path, flag):
    assert main(["check", results_file, "--baseline", results_file, flag, str(tmp_path / "results.json" / "x")]) == 2
    captured = capsys.readouterr()
    assert "not a folder" in captured.err and "PASS" not in captured.out and "Traceback" not in captured.err


def test_baseline_to_an_unusable_path_exits_2(results_file, capsys, tmp_path):
    assert main(["baseline", "save", results_file, "--to", str(tmp_path / "results.json" / "b.json")]) == 2
    assert "not a folder" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "budget"), [([], 300.0), (["--budget", "90"], 90.0), (["--no-budget"], None)])
def test_analyze_has_a_default_budget_and_no_budget_removes_it(monkeypatch, tmp_path, flags, budget):
    import perfscope.analyze

    seen = {}

    def analyze(options):
        seen["budget"] = options.budget_s
        return 0

    monkeypatch.setattr(perfscope.analyze, "analyze", analyze)
    assert main(["analyze", "x.py", "--out", str(tmp_path / "out"), *flags]) == 0
    assert seen["budget"] == budget

"""--out is checked before any work and claimed, so two analyses never write into one folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfscope.cli import main
from perfscope.errors import UserError
from perfscope.results.outdir import LOCK_NAME, claim_output_dir

WORKLOADS = Path(__file__).parent / "workloads"
HOLD = "import sys, time; from perfscope.results.outdir import claim_output_dir; c = claim_output_dir(sys.argv[1]); print('held', flush=True); time.sleep(120)"


@pytest.fixture
def holder(tmp_path):
    """Another process holding tmp_path/out."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield out, proc
    proc.kill()
    proc.wait()


def test_a_second_claim_is_refused_naming_the_holder(holder):
    out, proc = holder
    with pytest.raises(UserError, match=f"in use by another perfscope run \\(pid {proc.pid}\\)"):
        claim_output_dir(out)


def test_a_second_analyze_into_the_same_out_exits_2_at_once(holder, capsys, monkeypatch, tmp_path):
    out, proc = holder
    # "At once": before the workload is imported or any process started, decided on those events themselves (a
    # wall-clock bound moved with the machine's load). The workload marks its import; starting a process fails.
    workload = tmp_path / "marked_mlp.py"
    workload.write_text("import pathlib\npathlib.Path(__file__).with_suffix('.imported').touch()\n"
                        + (WORKLOADS / "mlp.py").read_text())

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(os, "fork", no_process)
    assert main(["analyze", str(workload), "--device", "cpu", "--out", str(out)]) == 2
    assert not workload.with_suffix(".imported").exists(), "the workload was imported before --out was refused"
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and "Traceback" not in err
    assert not (out / "trials").exists()


def test_the_claim_of_a_dead_process_is_taken_over(holder):
    out, proc = holder
    proc.kill()
    proc.wait()
    with claim_output_dir(out) as claim:
        assert (out / LOCK_NAME).read_text().split()[0] == str(os.getpid())
        assert claim.path == out
    assert not (out / LOCK_NAME).exists()


def test_a_lock_file_naming_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(f"{dead.stdout.strip()} {os.uname().nodename}\n")
    with claim_output_dir(out):
        assert (out / LOCK_NAME).read_text().split()[0] == str(os.getpid())


def test_a_claim_is_released_and_a_folder_it_created_is_removed_when_empty(tmp_path):
    with claim_output_dir(tmp_path / "new"):
        assert (tmp_path / "new").is_dir()
    assert not (tmp_path / "new").exists()
    with claim_output_dir(tmp_path / "kept"):
        (tmp_path / "kept" / "results.json").write_text("{}")
    assert (tmp_path / "kept" / "results.json").exists() and not (tmp_path / "kept" / LOCK_NAME).exists()


@pytest.mark.parametrize("out, reason", [("{file}", "is a file, not a folder"), ("{file}/sub", "is a file, not a folder"),
                                         ("", "empty")])
def test_an_unusable_out_exits_2_before_the_workload_is_loaded(tmp_path, capsys, out, reason):
    (tmp_path / "f").write_text("not a folder")
    # broken_import.py fails on import: a path problem must be reported first, without running user code.
    code = main(["analyze", str(WORKLOADS / "broken_import.py"), "--out", out.format(file=tmp_path / "f")])
    err = capsys.readouterr().err
    assert code == 2 and reason in err and "a_module_that_does_not_exist" not in err
    assert (tmp_path / "f").read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_out_exits_2(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    assert main(["analyze", str(WORKLOADS / "mlp.py"), "--out", str(ro / "out")]) == 2
    assert "no permission" in capsys.readouterr().err


def test_an_out_that_cannot_be_created_exits_2_even_for_root(capsys):
    code = main(["analyze", str(WORKLOADS / "broken_import.py"), "--out", "/proc/perfscope-cannot-create-this"])
    err = capsys.readouterr().err
    assert code == 2 and ("cannot create the folder" in err or "no permission" in err)
    assert "Traceback" not in err and "a_module_that_does_not_exist" not in err

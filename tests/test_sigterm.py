"""SIGTERM (a cancelled CI job, `timeout`, a background job that ignores Ctrl-C) stops analyze as Ctrl-C does: the
trial's processes die, the finished runs are reported, exit code 130."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from perfscope.results import Results
from tests.waiting import read_until, wait_for, wait_gone

WORKLOADS = Path(__file__).parent / "workloads"
pytestmark = pytest.mark.slow


def test_sigterm_saves_the_report_and_leaves_no_processes(tmp_path):
    hanging = tmp_path / "hanging"
    env = {**os.environ, "PERFSCOPE_TEST_FAILURE": "hang", "PERFSCOPE_TEST_HANG_FILE": str(hanging)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfscope", "analyze", str(WORKLOADS / "misbehaving.py"), "--device", "cpu",
         "--out", str(tmp_path / "out"), "--trial-timeout", "300", "--steps", "3", "--warmup", "1"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        read_until(proc.stderr, "baseline: running", timeout_s=300)
        wait_for(hanging.exists, "the trial process to enter its hang", timeout_s=300)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the trial process should be running"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)  # a hang guard only: the test waits on the process
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err  # not -15: the handler turned SIGTERM into the Ctrl-C path
    assert "interrupted" in err
    results = Results.load(tmp_path / "out" / "results.json")
    assert any("interrupted" in note for note in results.notes)
    assert (tmp_path / "out" / "report.html").exists()
    assert wait_gone(children) == []

"""Ctrl-C during a trial: the trial's process group dies, results.json stays valid, exit code 130."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from perfscope.results import Results

WORKLOADS = Path(__file__).parent / "workloads"
pytestmark = pytest.mark.slow


def test_ctrl_c_saves_and_leaves_no_processes(tmp_path):
    env = {**os.environ, "PERFSCOPE_TEST_FAILURE": "hang"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfscope", "analyze", str(WORKLOADS / "misbehaving.py"), "--device", "cpu",
         "--out", str(tmp_path), "--trial-timeout", "300", "--steps", "3", "--warmup", "1"],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    deadline = time.monotonic() + 120
    log = ""
    while "baseline: running" not in log and time.monotonic() < deadline:
        log += proc.stderr.readline()
    assert "baseline: running" in log
    time.sleep(3)  # the trial process is now inside its hang
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the trial process should be running"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    results = Results.load(tmp_path / "results.json")
    assert any("interrupted" in note for note in results.notes)
    time.sleep(0.5)
    survivors = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert survivors == []

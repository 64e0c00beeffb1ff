"""The HTML report in a real browser: plotly draws every chart, the console stays silent, names stay text.

Needs chromium (Debian: apt-get install chromium). Skipped locally without it; CI (env CI set) must have it.
Leaves a screenshot at .ci-artifacts/report.png for a human to look at.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perfscope.report import write_report
from tests.factories import make_full_results

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / ".ci-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=5000",  # lets plotly finish drawing before the DOM is dumped
]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium not installed")
    return path


def _run(chromium: str, tmp_path: Path, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # fresh profile per run
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _console(stderr: str) -> list[str]:
    # Chromium logs every console message (log, warn, error, uncaught exceptions) as ":CONSOLE(" / ":CONSOLE:".
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[(:]", line)]


def test_report_renders_in_chromium(chromium, tmp_path):
    page = write_report(make_full_results(), tmp_path / "report.html", fmt="html")
    n_charts = page.read_text().count('class="chart" id="chart-')
    dom = _run(chromium, tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == [], "console messages:\n" + "\n".join(_console(dom.stderr))
    drawn = len(re.findall(r'id="chart-[^"]+"[^>]*>\s*<div class="plot-container', dom.stdout))  # plotly filled each div
    assert dom.stdout.count('class="main-svg"') >= n_charts and drawn == n_charts

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    run = _run(chromium, tmp_path, page, f"--screenshot={shot}", "--window-size=1400,3000")
    assert run.returncode == 0 and shot.stat().st_size > 50_000, run.stderr[-2000:]


def test_hostile_names_stay_text_in_chromium(chromium, tmp_path):
    results = make_full_results(workload_name="<script>alert(1)</script>", kernel_name="</script><b>x", trial_prefix="<img src=x onerror=alert(2)>")
    page = write_report(results, tmp_path / "report.html", fmt="html")
    dom = _run(chromium, tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == [], "\n".join(_console(dom.stderr))
    body = dom.stdout.split("<body", 1)[1]
    assert "<img" not in body and "<b>x" not in body
    assert "&lt;/script&gt;&lt;b&gt;x" in body  # the kernel table shows the name as text
    assert "&lt;img src=x onerror=alert(2)&gt;baseline" in body  # and so do plotly's tick labels

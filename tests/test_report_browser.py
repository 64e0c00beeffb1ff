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


# ------------------------------------------------------------------ the first screen, as a reader sees it (issue 12)

FIRST_SCREEN = (1280, 800)
FIXTURES = REPO / "tests" / "data" / "reports"
MAX_PAGE_BYTES = 1.5 * 2**20

# Appended to a copy of the page (never to the product): once plotly has drawn, record where the answer's parts
# are on a 1280×800 screen and what each chart drew, as a JSON attribute the dumped DOM carries.
PROBE = """
<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    function box(sel) {
      var el = document.querySelector(sel);
      if (!el) { return null; }
      var r = el.getBoundingClientRect(), s = getComputedStyle(el);
      return {top: r.top, bottom: r.bottom, width: r.width, visible: s.display !== "none" && s.visibility !== "hidden",
              text: el.innerText};
    }
    var charts = Array.prototype.map.call(document.querySelectorAll("div.chart"), function (el) {
      var points = (el.data || []).reduce(function (n, t) { return n + ((t.x || []).length || (t.y || []).length); }, 0);
      return {id: el.id, points: points, svg: !!el.querySelector(".main-svg")};
    });
    var probe = {viewport: [innerWidth, innerHeight], charts: charts};
    ["#answer .answer-what", "#answer .answer-gain", "#closest", "#settings", "#reference", "#why", "#chart-gains"].forEach(
      function (sel) { probe[sel] = box(sel); });
    document.body.setAttribute("data-probe", JSON.stringify(probe));
  }, 0);
});
</script>
"""


def _first_screen(chromium: str, tmp_path: Path, results_json: Path, name: str) -> tuple[dict, Path]:
    import html as html_lib
    import json

    from perfscope.results import Results

    page = write_report(Results.load(results_json), tmp_path / name / "report.html", fmt="html")
    assert page.stat().st_size <= MAX_PAGE_BYTES, f"{page.stat().st_size / 2**20:.2f} MiB"
    probed = tmp_path / name / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    size = f"--window-size={FIRST_SCREEN[0]},{FIRST_SCREEN[1]}"
    dom = _run(chromium, tmp_path, probed, "--dump-dom", size)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == [], "\n".join(_console(dom.stderr))
    match = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert match, "the probe did not run"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"first-screen-{name}.png"
    shot.unlink(missing_ok=True)
    run = _run(chromium, tmp_path, page, f"--screenshot={shot}", size)
    assert run.returncode == 0 and shot.stat().st_size > 20_000, run.stderr[-2000:]
    return json.loads(html_lib.unescape(match.group(1))), shot


def _on_first_screen(probe: dict, selector: str) -> str:
    box = probe[selector]
    assert box is not None, f"{selector} is not on the page"
    assert box["visible"] and box["width"] > 0 and 0 <= box["top"] and box["bottom"] <= FIRST_SCREEN[1], (selector, box)
    return box["text"]


def _no_empty_chart(probe: dict) -> None:
    assert probe["charts"], "no chart drawn"
    for chart in probe["charts"]:
        assert chart["svg"] and chart["points"] > 0, chart


def test_quick_start_first_screen_answers(chromium, tmp_path):
    """The quick start's recorded run: recommendation, its gain with interval, its settings, the reference run."""
    probe, _ = _first_screen(chromium, tmp_path, FIXTURES / "quick_start_cpu.json", "quick-start")
    assert probe["viewport"][0] == FIRST_SCREEN[0]  # the layout width; "first screen" = the page's top 800 px at that width
    assert _on_first_screen(probe, "#answer .answer-what")
    gain = _on_first_screen(probe, "#answer .answer-gain") if probe["#answer .answer-gain"] else _on_first_screen(probe, "#closest")
    assert re.search(r"\d\.\d\d× (faster|slower)", gain) and re.search(r"99 % CI \[\d\.\d\d, \d\.\d\d\]", gain), gain
    assert "micro-batch" in _on_first_screen(probe, "#settings")
    assert re.search(r"baseline.*\d+ (baseline )?runs", _on_first_screen(probe, "#reference"))
    _no_empty_chart(probe)


def test_data_bound_first_screen_answers_and_says_why(chromium, tmp_path):
    """A data-bound Dataset workload's recorded run: the same answer, and why the step is slow (the data wait)."""
    probe, _ = _first_screen(chromium, tmp_path, FIXTURES / "data_bound_cpu.json", "data-bound")
    assert _on_first_screen(probe, "#answer .answer-what")
    gain = _on_first_screen(probe, "#answer .answer-gain") if probe["#answer .answer-gain"] else _on_first_screen(probe, "#closest")
    assert re.search(r"99 % CI \[\d\.\d\d, \d\.\d\d\]", gain), gain
    assert "DataLoader worker" in _on_first_screen(probe, "#settings")
    assert "baseline" in _on_first_screen(probe, "#reference")
    why = _on_first_screen(probe, "#why")
    assert why.startswith("Why slow data wait is") and "fix #1" in why, why
    _no_empty_chart(probe)

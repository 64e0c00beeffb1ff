"""Trace paths read back: the report links each trace wherever it is written, in the new layout and the old."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from perfscope.cli import main
from perfscope.report.view import build_view
from perfscope.results import Results
from tests.factories import make_full_results

SCHEMA1 = Path(__file__).parent / "data" / "schema1" / "results.json"


def _links(html: str) -> dict[str, str]:
    """href -> label of the report's trace links."""
    return dict(re.findall(r'<li><code>[^<]*</code>: <a href="([^"]+)">([^<]+)</a></li>', html))


def test_a_re_rendered_report_links_the_traces_from_its_own_folder(tmp_path: Path) -> None:
    results = make_full_results()
    results.trial("baseline").metrics.trace_path = "trials/baseline/trace/rank0.json.gz"
    results.trial("recommended").metrics.trace_path = "trials/recommended/trace/rank0.json.gz"
    results.save(tmp_path / "run" / "results.json")
    assert main(["report", str(tmp_path / "run" / "results.json"), "-o", str(tmp_path / "elsewhere" / "report.html")]) == 0
    links = _links((tmp_path / "elsewhere" / "report.html").read_text(encoding="utf-8"))
    assert links == {  # the label says which run's trace it is: every file is a rank0.json.gz
        "../run/trials/baseline/trace/rank0.json.gz": "../run/trials/baseline/trace/rank0.json.gz",
        "../run/trials/recommended/trace/rank0.json.gz": "../run/trials/recommended/trace/rank0.json.gz",
    }
    assert main(["report", str(tmp_path / "run" / "results.json")]) == 0  # beside results.json: as stored
    assert set(_links((tmp_path / "run" / "report.html").read_text(encoding="utf-8"))) == {
        "trials/baseline/trace/rank0.json.gz", "trials/recommended/trace/rank0.json.gz"}


def test_an_old_folder_with_traces_side_by_side_still_reads_and_links(tmp_path: Path) -> None:
    shutil.copy(SCHEMA1, tmp_path / "results.json")
    results = Results.load(tmp_path / "results.json")
    view = build_view(results, report_dir=tmp_path)
    assert [t.href for t in view.traces] == ["traces/baseline.pt.trace.json.gz", "traces/recommended.pt.trace.json.gz"]
    assert main(["report", str(tmp_path / "results.json"), "-o", str(tmp_path / "out" / "r.html")]) == 0
    assert set(_links((tmp_path / "out" / "r.html").read_text(encoding="utf-8"))) == {
        "../traces/baseline.pt.trace.json.gz", "../traces/recommended.pt.trace.json.gz"}

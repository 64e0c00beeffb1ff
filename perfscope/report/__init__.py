"""Reports from a results file: a self-contained HTML page and a Markdown summary.

    >>> from perfscope.report import write_report
    >>> write_report(Results.load("perfscope-out/results.json"), Path("report.html"), fmt="html")

Design notes: docs/report.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from perfscope.report.html import render_html
from perfscope.report.markdown import render_markdown
from perfscope.results import Results
from perfscope.results.io import write_text

__all__ = ["render_html", "render_markdown", "write_report"]


def write_report(results: Results, path: Path, fmt: Literal["html", "md"] = "html") -> Path:
    """Render and write atomically (temp file + rename): a reader never sees half a report."""
    path = Path(path)
    if fmt == "html":
        text = render_html(results, report_dir=path.resolve().parent)
    elif fmt == "md":
        text = render_markdown(results)
    else:
        raise ValueError(f"unknown report format {fmt!r} (expected 'html' or 'md')")
    return write_text(path, text)

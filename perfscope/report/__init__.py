"""Reports from a results file: a self-contained HTML page and a Markdown summary.

    >>> from perfscope.report import write_report
    >>> write_report(Results.load("perfscope-out/results.json"), Path("report.html"), fmt="html")

The only stage of perfscope that knows HTML or plotly: view.py decides what to show, html.py and
markdown.py lay it out, escaping.py keeps user-derived names inert.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from perfscope.report.html import render_html
from perfscope.report.markdown import render_markdown
from perfscope.results import Results

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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path

"""The self-contained HTML report: the view model laid out by Jinja2, charts drawn by an embedded plotly.js.

    >>> from perfscope.report import render_html
    >>> write_text("report.html", render_html(results))   # perfscope.results.io: atomic

Offline by construction: plotly.js's basic partial bundle is inlined once (vendored, 1.2 MB), the charts travel as one
JSON blob drawn with Plotly.newPlot, and the page references no URL it would fetch (no CDN, no fonts).
"""

from __future__ import annotations

import functools
from pathlib import Path

from markupsafe import Markup

from perfscope.report.charts.base import PLOTLY_TRACE_TYPES
from perfscope.report.escaping import safe_inline_js, script_json
from perfscope.report.templates import template_environment
from perfscope.report.view import ReportView, build_view
from perfscope.results import Results

__all__ = ["PLOTLY_TRACE_TYPES", "charts_json", "plotly_js", "render_html", "render_view_html"]

VENDORED_PLOTLY = Path(__file__).parent / "vendor" / "plotly-basic.min.js"


@functools.cache
def plotly_js() -> str:
    """plotly.js's "basic" partial bundle (scatter, bar, pie; 1.2 MB), vendored in report/vendor/.

    The full plotly.min.js of the plotly package (4.6 MB) is the fallback when the vendored file is missing
    (a stripped install): the page still draws, only larger.
    """
    if VENDORED_PLOTLY.is_file():
        return safe_inline_js(VENDORED_PLOTLY.read_text(encoding="utf-8"))
    from plotly.offline import get_plotlyjs

    return safe_inline_js(get_plotlyjs())


def charts_json(view: ReportView) -> str:
    dist = view.distributed.chart if view.distributed else None
    charts = ([view.gain_chart] if view.gain_chart else []) + ([dist] if dist else []) + view.charts
    return script_json([{"id": c.id, "figure": c.figure} for c in charts])


def render_view_html(view: ReportView) -> str:
    # The two Markup() values are the only unescaped inserts in the page; both were made safe above.
    return template_environment().get_template("base.html.j2").render(
        view=view,
        plotly_js=Markup(plotly_js()) if view.charts or view.gain_chart or (view.distributed and view.distributed.chart) else "",
        charts_json=Markup(charts_json(view)),
    )


def render_html(results: Results, *, report_dir: Path | None = None) -> str:
    """The whole page as one string. ``report_dir``: where the file will live, for relative trace links."""
    return render_view_html(build_view(results, report_dir=report_dir))

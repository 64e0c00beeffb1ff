"""The self-contained HTML report: the view model laid out by Jinja2, charts drawn by an embedded plotly.js.

    >>> from perfscope.report import render_html
    >>> write_text("report.html", render_html(results))   # perfscope.results.io: atomic

Design notes: docs/report.md.
"""

from __future__ import annotations

import functools
import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2
from markupsafe import Markup

from perfscope.cache_dir import cache_dir
from perfscope.report.charts.base import PLOTLY_TRACE_TYPES
from perfscope.report.escaping import safe_inline_js, script_json
from perfscope.report.view import ReportView, build_view
from perfscope.results import Results

__all__ = ["PLOTLY_TRACE_TYPES", "charts_json", "plotly_js", "render_html", "render_view_html"]

TEMPLATE_PACKAGE = "perfscope._templates"
SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


def template_root() -> Traversable:
    """``<repo>/reports/templates`` beside this source tree when there is one, else the installed package.

    The checkout's own folder first: a package ``perfscope._templates`` mapped by an editable install of
    another checkout (a git worktree beside the main one) must not render this tree's views.
    """
    if (SOURCE_TEMPLATES / "base.html.j2").is_file():
        return SOURCE_TEMPLATES
    try:
        root = importlib.resources.files(TEMPLATE_PACKAGE)
        if root.joinpath("base.html.j2").is_file():
            return root
    except ModuleNotFoundError:
        pass
    raise FileNotFoundError(f"perfscope report templates not found (package {TEMPLATE_PACKAGE} or {SOURCE_TEMPLATES})")


def _loader(root: Traversable) -> jinja2.BaseLoader:
    # A Traversable may live inside a zip, so read through it rather than assume a directory on disk.
    def load(name: str) -> str | None:
        node = root.joinpath(*name.split("/"))
        return node.read_text(encoding="utf-8") if node.is_file() else None

    return jinja2.FunctionLoader(load)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = cache_dir() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))  # written atomically (temp file + rename) by Jinja2


@functools.cache
def template_environment() -> jinja2.Environment:
    """Autoescaping on for everything: all template text is HTML (the Markdown is built in Python)."""
    return jinja2.Environment(
        loader=_loader(template_root()),
        bytecode_cache=_bytecode_cache(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a misspelt field is an error, not a silently empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )


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
    """Every chart of the page, "[]" when it has none (then the page carries no plotly.js)."""
    dist = view.distributed.chart if view.distributed else None
    charts = ([view.gain_chart] if view.gain_chart else []) + ([dist] if dist else []) + view.charts
    return script_json([{"id": c.id, "figure": c.figure} for c in charts])


def render_view_html(view: ReportView) -> str:
    # The two Markup() values are the only unescaped inserts in the page; both were made safe above.
    charts = charts_json(view)
    return template_environment().get_template("base.html.j2").render(
        view=view, plotly_js=Markup(plotly_js()) if charts != "[]" else "", charts_json=Markup(charts))


def render_html(results: Results, *, report_dir: Path | None = None) -> str:
    """The whole page as one string. ``report_dir``: where the file will live, for relative trace links."""
    return render_view_html(build_view(results, report_dir=report_dir))

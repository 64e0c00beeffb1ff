"""What every chart shares: the Chart record, the roles that colour trials, the page's axis and layout style.

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_POINTS_PER_CHART = 2000  # keeps the page small whatever the run length
GIB = 2**30
MIB = 2**20

FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
BLUE, ORANGE, GREEN, RED, TEAL, PURPLE, GREY = "#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9AA5B1"
PALETTE = [BLUE, ORANGE, GREEN, RED, TEAL, PURPLE, "#9D755D", GREY]
PLOTLY_TRACE_TYPES = frozenset({"scatter", "bar", "pie"})
"""Trace types the page's plotly.js bundle draws (report/html.py): a chart with another is not drawn, and says so."""


@dataclass(kw_only=True, slots=True)
class Chart:
    """One chart: the page title and caption are ours (autoescaped by Jinja); ``figure`` goes to plotly."""

    id: str
    title: str
    caption: str
    figure: dict[str, Any]
    wide: bool = False  # spans both grid columns


@dataclass(kw_only=True, slots=True)
class Roles:
    """Which trial is the baseline and which the recommendation (their colours), and every trial's escaped label."""

    baseline: str | None
    recommended: str | None = None
    names: dict[str, str] = field(default_factory=dict)  # trial name -> escaped label


def axis_spec(title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "standoff": 8},
        "gridcolor": "#e5e7eb",
        "zerolinecolor": "#cbd5e1",
        "linecolor": "#cbd5e1",
        "automargin": True,
        **extra,
    }


def layout_spec(x_title: str, y_title: str, *, height: int = 320, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 16, "r": 16, "t": 16, "b": 16},
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "xaxis": axis_spec(x_title),
        "yaxis": axis_spec(y_title),
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
        "hoverlabel": {"font": {"family": FONT}},
        "bargap": 0.3,
    }
    layout.update(extra)
    return layout


def hbar(y: list[str], x: list[Any], color: Any, hover: str, **extra: Any) -> dict[str, Any]:
    """A horizontal bar trace, one bar per trial or category: the shape most charts draw."""
    return {"type": "bar", "orientation": "h", "y": y, "x": x, "marker": {"color": color}, "hovertemplate": hover, **extra}


def bar_height(n: int) -> int:
    return max(180, 90 + 34 * n)


def trial_color(name: str, roles: Roles) -> str:
    if name == roles.recommended:
        return GREEN
    if name == roles.baseline:
        return GREY
    return BLUE

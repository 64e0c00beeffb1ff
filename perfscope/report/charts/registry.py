"""The chart registry: the page's charts in order, and how a run without data for one says so in a line.

Design notes: docs/report.md.
"""

from __future__ import annotations

from collections.abc import Callable

from perfscope.registry import Registry
from perfscope.report.charts.base import PLOTLY_TRACE_TYPES, Chart, Roles
from perfscope.report.charts.micro_batch import micro_batch_charts
from perfscope.report.charts.timeline import utilization_chart
from perfscope.report.charts.trials import (
    kernel_category_chart,
    memory_breakdown_chart,
    memory_categories_chart,
    mfu_chart,
    step_breakdown_chart,
    throughput_chart,
)
from perfscope.report.escaping import plotly_text
from perfscope.results import Results

ChartFunction = Callable[[Results, Roles], "Chart | list[Chart] | None"]

CHARTS: Registry[ChartFunction] = Registry([
    step_breakdown_chart,
    mfu_chart,
    throughput_chart,
    memory_breakdown_chart,
    memory_categories_chart,
    micro_batch_charts,
    kernel_category_chart,
    utilization_chart,
], key=lambda draw: draw, what="chart")
"""The run's charts in page order (the answer's gain chart and the baseline's breakdown are placed by the view)."""


register = CHARTS.register
"""Add a chart after the built-in ones (a plugin, a test): the next report draws it."""
registered = CHARTS.registered
"""`register` for the length of a block (tests)."""


def build_charts(results: Results, *, baseline: str | None, recommended: str | None) -> tuple[list[Chart], list[str]]:
    """(every chart the results have data for, in page order; one line per chart left out, saying why).

    No chart is drawn empty: a chart without data, and the GPU's charts on a CPU run, become a line of text.
    """
    roles = Roles(baseline=baseline, recommended=recommended, names={t.name: plotly_text(t.name) for t in results.trials})
    charts: list[Chart] = []
    for draw in CHARTS:
        made = draw(results, roles)
        charts += made if isinstance(made, list) else [made] if made is not None else []
    absent: list[str] = []
    if results.environment.device_type != "cuda":
        absent.append("GPU utilization, power and clock charts: not drawn, this run used no GPU"
                      + (" (the host CPU load is in the utilization timeline)." if any(c.id == "utilization" for c in charts) else "."))
    shown = []
    for c in charts:
        if not any(v is not None for t in c.figure.get("data", []) for v in (t.get("x") or []) + (t.get("y") or [])):
            absent.append(f"{c.title}: not drawn, this run recorded no data for it.")
            continue
        unknown = sorted({str(t.get("type", "scatter")) for t in c.figure.get("data", [])} - PLOTLY_TRACE_TYPES)
        if unknown:  # the page's plotly bundle would leave an empty box: say why instead
            absent.append(f"{c.title}: not drawn, the page's plotly bundle has no {', '.join(unknown)} trace.")
            continue
        shown.append(c)
    narrow = [c for c in shown if not c.wide]
    if len(narrow) % 2:  # the page lays charts out two per row: let the odd one out span the row
        narrow[-1].wide = True
    return shown, absent

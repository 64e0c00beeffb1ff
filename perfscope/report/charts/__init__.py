"""The report's charts: Plotly figure specs (plain dicts) built from the results model, one module per family.

    >>> from perfscope.report.charts import build_charts
    >>> charts, absent = build_charts(results, baseline="baseline", recommended=None)

Design notes: docs/report.md.
"""

from perfscope.report.charts.base import MAX_POINTS_PER_CHART, Chart, Roles
from perfscope.report.charts.breakdown import baseline_breakdown_chart
from perfscope.report.charts.gains import gain_chart
from perfscope.report.charts.ranks import rank_step_chart
from perfscope.report.charts.registry import CHARTS, build_charts, register, registered

__all__ = ["CHARTS", "MAX_POINTS_PER_CHART", "Chart", "Roles", "baseline_breakdown_chart", "build_charts", "gain_chart",
           "rank_step_chart", "register", "registered"]

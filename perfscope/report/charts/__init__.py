"""The report's charts: Plotly figure specs (plain dicts) built from the results model, one module per family.

    >>> from perfscope.report.charts import build_charts
    >>> charts, absent = build_charts(results, baseline="baseline", recommended=None)

base.py holds the Chart record and the page's style; registry.py the page's charts in order. Adding a chart =
one function ``(results, roles) -> Chart | None`` in a module here (a new family gets a new module) + one line in
registry.CHARTS (or `register(my_chart)`) + a test. The answer's gain chart (gains.py) and the baseline's breakdown
(breakdown.py) read the ranking and the ranked fixes, so the view places them; rank_step_chart belongs to the
distributed section.
"""

from perfscope.report.charts.base import MAX_POINTS_PER_CHART, Chart, Roles
from perfscope.report.charts.breakdown import baseline_breakdown_chart
from perfscope.report.charts.gains import gain_chart
from perfscope.report.charts.ranks import rank_step_chart
from perfscope.report.charts.registry import CHARTS, build_charts, register, registered

__all__ = ["CHARTS", "MAX_POINTS_PER_CHART", "Chart", "Roles", "baseline_breakdown_chart", "build_charts", "gain_chart",
           "rank_step_chart", "register", "registered"]

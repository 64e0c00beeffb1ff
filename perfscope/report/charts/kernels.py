"""Device time per kernel category from the trace, the baseline's beside the recommendation's.
"""

from __future__ import annotations

from perfscope.report import facts
from perfscope.report.charts.base import BLUE, Chart, Roles, axis_spec, bar_height, hbar, layout_spec, trial_color
from perfscope.report.escaping import plotly_text
from perfscope.results import Results


def kernel_category_chart(results: Results, roles: Roles) -> Chart | None:
    trials = [(n, results.trial(n)) for n in (roles.baseline, roles.recommended) if n]
    series = [(n, by_cat) for n, t in trials if t and t.metrics and (by_cat := facts.kernel_time_by_category(t.metrics.trace_facts))]
    if not series:
        return None
    categories = sorted({c for _, d in series for c in d}, key=lambda c: -max(d.get(c, 0.0) for _, d in series))
    data = [hbar([plotly_text(c) for c in categories], [d.get(c, 0.0) * 1e3 for c in categories],
                 trial_color(n, roles) if len(series) > 1 else BLUE, "%{y}: %{x:.2f} ms<extra>" + roles.names[n] + "</extra>",
                 name=roles.names[n])
            for n, d in series]
    figure = {"data": data, "layout": layout_spec("Device time in the traced steps (ms)", "", height=bar_height(len(categories)), barmode="group", yaxis=axis_spec("", autorange="reversed"), showlegend=len(series) > 1)}
    return Chart(id="kernel-categories", title="Kernel time by category", caption="Device time per kernel category over the profiled steps, from the trace.", figure=figure)


"""The answer as a chart: every measured configuration's gain and interval against the 1.0 line, in the order
perfscope.ranking gives (the knob table's and the ranked fixes' order).
"""

from __future__ import annotations

from typing import Any

from perfscope.ranking import GainRow
from perfscope.report.charts.base import GREEN, GREY, RED, Chart, axis_spec, bar_height, layout_spec
from perfscope.report.escaping import plotly_text
from perfscope.report.format import gain_text


def gain_chart(gains: list[GainRow]) -> Chart | None:
    """The answer as a chart: every measured configuration's throughput ratio and interval against a 1.0 line."""
    rows = [(plotly_text(r.label), r.gain, r.rejected) for r in gains]
    if not rows:
        return None

    def verdict(g: Any, rejected: bool) -> str:
        if rejected:
            return " · rejected (numerics)"
        return {"faster": "", "slower": "", "same": " · n.s. (same)"}.get(g.verdict, " · n.s.")

    lo = min(min(g.low for _, g, _ in rows), 0.9)
    hi = max(max(g.high for _, g, _ in rows), 1.1)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, 20, 50) if lo / 1.2 <= t <= hi * 1.2]

    colors = [GREEN if g.faster and not rej else RED if g.verdict == "slower" else GREY for _, g, rej in rows]
    figure = {
        "data": [
            {
                "type": "scatter",
                "mode": "markers+text",
                "x": [g.ratio for _, g, _ in rows],
                "y": [label for label, _, _ in rows],
                "error_x": {"type": "data", "symmetric": False, "array": [g.high - g.ratio for _, g, _ in rows],
                            "arrayminus": [g.ratio - g.low for _, g, _ in rows], "color": "#6b7280", "thickness": 1.5},
                "marker": {"color": colors, "size": 10},
                "text": [f"{gain_text(g.ratio)}{verdict(g, rej)}" for _, g, rej in rows],
                "textposition": "top center",
                "hovertemplate": "%{y}<br>%{x:.2f}× the baseline's samples/s<extra></extra>",
                "cliponaxis": False,
            }
        ],
        "layout": layout_spec(
            "Throughput vs the baseline (×, log scale; bars: confidence interval)", "", height=bar_height(len(rows)) + 20,
            xaxis=axis_spec("Throughput vs the baseline (×, log scale; bars: confidence interval)", type="log",
                        tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks]),
            yaxis=axis_spec("", autorange="reversed"),
            shapes=[{"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": 1, "x1": 1, "line": {"color": "#111827", "width": 1.5}}],
            showlegend=False,
        ),
    }
    return Chart(id="gains", title="Measured gains, best first",
                 caption="Each configuration measured in this run, as its throughput over the baseline's, with its confidence "
                         "interval; right of the 1.0 line is faster. Green: decidedly faster; red: slower; grey: no "
                         "significant change (n.s.).",
                 figure=figure, wide=True)

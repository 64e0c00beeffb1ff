"""Data-parallel runs: each rank's step beside its own compute step, stragglers in red.
"""

from __future__ import annotations

from typing import Any

from perfscope.report.charts.base import BLUE, ORANGE, RED, TEAL, Chart, layout_spec
from perfscope.report.escaping import plotly_text
from perfscope.results import DistributedFacts


def rank_step_chart(facts: DistributedFacts) -> Chart | None:
    """Step time per rank (wall / steps), each rank's own compute step (its window without gradient sync) beside it;
    straggler ranks in red: a slow rank shows as a long compute bar, its peers' waiting as the gap to their step."""
    ranks = [r for r in facts.ranks if r.mean_step_time_s is not None]
    if not ranks:
        return None
    stragglers = {s.rank for s in facts.stragglers}
    labels = [plotly_text(f"rank {r.rank}" + (f" · {r.node}" if r.node else "")) for r in ranks]
    data: list[dict[str, Any]] = [{
        "type": "bar", "name": "step (wall / steps)", "x": labels, "y": [r.mean_step_time_s * 1e3 for r in ranks],  # type: ignore[operator]
        "marker": {"color": [RED if r.rank in stragglers else BLUE for r in ranks]},
        "hovertemplate": "%{x}<br>step %{y:.1f} ms<extra></extra>",
    }]
    local = [r.mean_local_step_time_s for r in ranks]
    if any(v is not None for v in local):
        data.append({
            "type": "bar", "name": "own compute (no gradient sync)", "x": labels, "y": [v * 1e3 if v is not None else None for v in local],
            "marker": {"color": [ORANGE if r.rank in stragglers else TEAL for r in ranks]},
            "hovertemplate": "%{x}<br>compute only %{y:.1f} ms<extra></extra>",
        })
    caption = ("Each rank's mean step (wall / steps of its window) and, beside it, its own compute step from a window without "
               "gradient communication (no peer can slow it). Straggler ranks are red (their compute orange).")
    return Chart(id="rank-steps", title="Step time per rank", caption=caption,
                 figure={"data": data, "layout": layout_spec("", "Time per step (ms)", barmode="group")}, wide=True)

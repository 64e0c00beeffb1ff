"""The baseline's step split into slices, each bar naming the ranked fixes that act on it (fix #N).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfscope.report.charts.base import BLUE, ORANGE, Chart, axis_spec, bar_height, hbar, layout_spec
from perfscope.report.escaping import plotly_text
from perfscope.results.breakdown import StepSlice


def baseline_breakdown_chart(slices: Sequence[StepSlice], marks: dict[str, list[int]], trial: str) -> Chart | None:
    """The baseline's step split into slices (perfscope.results.breakdown), each bar naming the ranked fixes that
    act on it ("fix #1"): why the step is slow, and which fix shrinks which part, at a glance."""
    if not slices:
        return None
    step_ms = sum(s.seconds for s in slices) * 1e3

    def text(s: StepSlice) -> str:
        fixes = marks.get(s.key, [])
        tag = (" · fix " + ", ".join(f"#{r}" for r in fixes)) if fixes else ""
        return f"{s.seconds * 1e3:.1f} ms · {s.share * 100:.0f} %{tag}"

    figure = {
        "data": [hbar([plotly_text(s.label) for s in slices], [s.seconds * 1e3 for s in slices],
                      [ORANGE if marks.get(s.key) else BLUE for s in slices], "%{y}: %{x:.2f} ms per step<extra></extra>",
                      text=[text(s) for s in slices], textposition="auto", cliponaxis=False)],
        "layout": layout_spec("Time per step (ms)", "", height=bar_height(len(slices)), yaxis=axis_spec("", autorange="reversed"),
                          showlegend=False),
    }
    split = "no trace: not split further" if {s.key for s in slices} <= {"data_wait", "compute"} else "the profiler trace's proportions"
    return Chart(id="baseline-breakdown", title="Where the baseline's step time goes",
                 caption=f"The baseline's step ({trial}, {step_ms:.1f} ms = wall / steps) split into the exposed data wait "
                         f"and the rest ({split}). Orange bars are what a ranked fix acts on; each bar names those fixes (fix #N).",
                 figure=figure, wide=True)

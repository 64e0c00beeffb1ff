"""The micro-batch search: throughput and peak memory at each size tried, out-of-memory points marked.
"""

from __future__ import annotations

from typing import Any

from perfscope.report.charts.base import BLUE, GIB, MIB, PURPLE, RED, Chart, Roles, axis_spec, layout_spec
from perfscope.report.escaping import plotly_text
from perfscope.results import Results


def _capacity(results: Results) -> int | None:
    """The line memory is drawn against: the device's memory on a GPU, the host's on a CPU."""
    for t in results.ok_trials():
        if t.metrics and t.metrics.device_memory_capacity_bytes:
            return t.metrics.device_memory_capacity_bytes
    if results.environment.device_type != "cuda":
        return results.environment.host_memory_bytes
    return results.environment.device_memory_bytes


def micro_batch_charts(results: Results, roles: Roles) -> list[Chart]:
    points = sorted(results.sweep.micro_batch if results.sweep else [], key=lambda p: p.micro_batch_size)
    if not points:
        return []
    ok = [p for p in points if p.status == "ok"]
    oom = [p for p in points if p.status == "oom"]
    capacity = _capacity(results)
    cuda = results.environment.device_type == "cuda"
    what = "allocator peak" if cuda else "host RSS"
    cap_what = "device capacity" if cuda else "host memory"
    xaxis = axis_spec("Micro-batch size (samples)", type="log", tickvals=[p.micro_batch_size for p in points], ticktext=[str(p.micro_batch_size) for p in points])

    def hover(p: Any) -> str:
        return f"{plotly_text(p.trial)}<br>micro-batch {p.micro_batch_size} × {p.grad_accum_steps} accumulation<br>{plotly_text(p.status)}"

    def oom_trace(y: float) -> dict[str, Any]:
        """Red crosses at the micro-batches that ran out of memory."""
        return {"type": "scatter", "mode": "markers", "name": "out of memory", "x": [p.micro_batch_size for p in oom],
                "y": [y] * len(oom), "text": [hover(p) for p in oom], "hovertemplate": "%{text}<extra></extra>",
                "marker": {"symbol": "x", "size": 13, "color": RED, "line": {"width": 2, "color": RED}}}

    tp_ok = [p for p in ok if p.samples_per_s is not None]
    throughput = {
        "data": [{"type": "scatter", "mode": "lines+markers", "name": "throughput", "x": [p.micro_batch_size for p in tp_ok],
                  "y": [p.samples_per_s for p in tp_ok], "text": [hover(p) for p in tp_ok],
                  "hovertemplate": "%{text}<br>%{y:,.1f} samples/s<extra></extra>", "line": {"color": BLUE, "width": 2},
                  "marker": {"size": 8}}],
        "layout": layout_spec("", "Throughput (samples/s)", xaxis=xaxis, yaxis=axis_spec("Throughput (samples/s)", rangemode="tozero")),
    }
    if oom:  # the marker sits on the x axis: unclipped, or half of it would be cut
        throughput["data"].append(oom_trace(0) | {"cliponaxis": False})
    mem_ok = [p for p in ok if p.peak_memory_bytes is not None]
    # MiB below a GiB: an axis in GiB with SI ticks reads "µGiB"/"mGiB" for small models.
    unit, scale = ("GiB", GIB) if max((p.peak_memory_bytes or 0) for p in points) >= GIB or (capacity or 0) >= GIB * 4 else ("MiB", MIB)
    memory_data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines+markers", "name": f"peak memory ({what})", "x": [p.micro_batch_size for p in mem_ok],
         "y": [p.peak_memory_bytes / scale for p in mem_ok],  # type: ignore[operator]
         "text": [hover(p) for p in mem_ok], "hovertemplate": "%{text}<br>%{y:,.1f} " + unit + "<extra></extra>",
         "line": {"color": PURPLE, "width": 2}, "marker": {"size": 8}}
    ]
    shapes, annotations = [], []
    if capacity:
        cap = capacity / scale
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": cap, "y1": cap, "line": {"color": RED, "dash": "dash", "width": 1.5}})
        annotations.append({"xref": "paper", "x": 0, "xanchor": "left", "y": cap, "yanchor": "bottom", "text": f"{cap_what} {capacity / GIB:.1f} GiB", "showarrow": False, "font": {"color": RED, "size": 11}})
    if oom:
        memory_data.append(oom_trace(capacity / scale if capacity else max((p.peak_memory_bytes or 0) / scale for p in points)))
    memory = {
        "data": memory_data,
        "layout": layout_spec("", "", xaxis=xaxis, yaxis=axis_spec(f"Peak memory, {what} ({unit})", rangemode="tozero", tickformat=",.0f" if unit == "MiB" else ",.1f"),
                          shapes=shapes, annotations=annotations),
    }
    caption_oom = " Red crosses mark micro-batches that ran out of memory." if oom else ""
    return [
        Chart(id="mb-throughput", title="Throughput vs micro-batch", caption="Samples per second at each micro-batch size tried." + caption_oom, figure=throughput),
        Chart(id="mb-memory", title=f"Peak memory ({what}) vs micro-batch",
              caption=f"Peak memory ({'the caching allocator' + chr(39) + 's max allocated' if cuda else 'resident set size of the trial process'}) "
                      f"at each micro-batch size; the dashed line is the {cap_what}." + caption_oom, figure=memory),
    ]


"""The utilization timeline: NVML counters and host CPU load over the measured steps, one panel per unit.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfscope.report.charts.base import MAX_POINTS_PER_CHART, PALETTE, Chart, Roles, axis_spec, layout_spec
from perfscope.results import Results, UtilizationSample


def _downsample(samples: Sequence[UtilizationSample], limit: int) -> list[UtilizationSample]:
    if len(samples) <= limit:
        return list(samples)
    stride = -(-len(samples) // limit)
    kept = list(samples[::stride])
    if kept[-1] is not samples[-1] and len(kept) < limit:
        kept.append(samples[-1])
    return kept[:limit]


def utilization_chart(results: Results, roles: Roles) -> Chart | None:
    names = [n for n in (roles.baseline, roles.recommended) if n]
    trials = [t for t in (results.trial(n) for n in names) if t and t.metrics and t.metrics.utilization and t.metrics.utilization.samples]
    if not trials:
        return None
    metrics = [
        ("gpu_util_percent", "GPU util", "Utilization (%)"),
        ("cpu_percent", "host CPU", "Utilization (%)"),
        ("power_w", "power", "Power (W)"),
        ("sm_clock_mhz", "SM clock", "SM clock (MHz)"),
    ]
    present = [m for m in metrics if any(getattr(s, m[0]) is not None for t in trials for s in t.metrics.utilization.samples)]  # type: ignore[union-attr]
    if not present:
        return None
    panels = list(dict.fromkeys(m[2] for m in present))  # one stacked panel per unit
    per_series = max(2, MAX_POINTS_PER_CHART // (len(present) * len(trials)))
    gap = 0.06
    height = (1 - gap * (len(panels) - 1)) / len(panels)
    layout = layout_spec("", "", height=130 + 170 * len(panels))
    layout.pop("xaxis"), layout.pop("yaxis")
    for i, unit in enumerate(panels):
        suffix = "" if i == 0 else str(i + 1)
        top = 1 - i * (height + gap)
        # Utilization and power read best from zero; a clock's dips are invisible on a zero-based axis.
        layout[f"yaxis{suffix}"] = axis_spec(unit, domain=[top - height, top], rangemode="normal" if "MHz" in unit else "tozero")
        last = i == len(panels) - 1
        xaxis = axis_spec("Time since the measured steps began (s)" if last else "", anchor=f"y{suffix}", showticklabels=last)
        if i:
            xaxis["matches"] = "x"  # panels zoom together
        layout[f"xaxis{suffix}"] = xaxis
    data = []
    dashes = ["solid", "dot"]
    for ti, trial in enumerate(trials):
        samples = _downsample(trial.metrics.utilization.samples, per_series)  # type: ignore[union-attr]
        for mi, (attr, label, unit) in enumerate(present):
            idx = panels.index(unit)
            suffix = "" if idx == 0 else str(idx + 1)
            points = [(s.t_s, getattr(s, attr)) for s in samples if getattr(s, attr) is not None]
            if not points:
                continue
            name = f"{label} · {roles.names[trial.name]}" if len(trials) > 1 else label
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name,
                    "x": [p[0] for p in points],
                    "y": [p[1] for p in points],
                    "xaxis": f"x{suffix}",
                    "yaxis": f"y{suffix}",
                    "line": {"color": PALETTE[mi % len(PALETTE)], "width": 1.6, "dash": dashes[ti % 2]},
                    "hovertemplate": name + ": %{y:.1f}<br>t = %{x:.2f} s<extra></extra>",
                }
            )
    caption = "NVML device counters and host CPU load sampled during the measured steps"
    caption += " (solid: baseline, dotted: recommended)." if len(trials) > 1 else "."
    return Chart(id="utilization", title="Utilization timeline", caption=caption, figure={"data": data, "layout": layout}, wide=True)


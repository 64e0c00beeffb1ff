"""Plotly figure specs (plain dicts) for the report's charts, built from the results model.

    >>> from perfscope.report.charts import build_charts
    >>> charts, absent = build_charts(results, baseline="baseline", recommended=None)

Why plain dicts and not plotly.graph_objects: a spec is data that the page hands to Plotly.newPlot, and
dicts keep it small (no per-figure template) and deterministic. Tests validate them with go.Figure.
Every user-derived string (trial, knob, kernel names) goes through ``plotly_text`` before it enters a
figure, because plotly renders its own HTML subset in ticks, legends and hover text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfscope.report import facts
from perfscope.report.escaping import plotly_text
from perfscope.report.story import gain_of, gain_words
from perfscope.results import DistributedFacts, Results, Trial, UtilizationSample
from perfscope.results.breakdown import StepSlice

MAX_POINTS_PER_CHART = 2000  # keeps the page small whatever the run length
GIB = 2**30
MIB = 2**20

FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
BLUE, ORANGE, GREEN, RED, TEAL, PURPLE, GREY = "#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#9AA5B1"
PALETTE = [BLUE, ORANGE, GREEN, RED, TEAL, PURPLE, "#9D755D", GREY]


@dataclass(kw_only=True, slots=True)
class Chart:
    """One chart: the page title and caption are ours (autoescaped by Jinja); ``figure`` goes to plotly."""

    id: str
    title: str
    caption: str
    figure: dict[str, Any]
    wide: bool = False  # spans both grid columns


@dataclass(kw_only=True, slots=True)
class _Roles:
    baseline: str | None
    recommended: str | None = None
    names: dict[str, str] = field(default_factory=dict)  # trial name -> escaped label


def _axis(title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "standoff": 8},
        "gridcolor": "#e5e7eb",
        "zerolinecolor": "#cbd5e1",
        "linecolor": "#cbd5e1",
        "automargin": True,
        **extra,
    }


def _layout(x_title: str, y_title: str, *, height: int = 320, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 16, "r": 16, "t": 16, "b": 16},
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "xaxis": _axis(x_title),
        "yaxis": _axis(y_title),
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "traceorder": "normal"},
        "hoverlabel": {"font": {"family": FONT}},
        "bargap": 0.3,
    }
    layout.update(extra)
    return layout


def _bar_height(n: int) -> int:
    return max(180, 90 + 34 * n)


def _trial_color(name: str, roles: _Roles) -> str:
    if name == roles.recommended:
        return GREEN
    if name == roles.baseline:
        return GREY
    return BLUE


def _ok(results: Results) -> list[Trial]:
    return results.ok_trials()


# --------------------------------------------------------------------------------------------- charts


def mfu_chart(results: Results, roles: _Roles) -> Chart | None:
    trials = [t for t in _ok(results) if t.metrics and t.metrics.mfu is not None]
    if not trials:
        return None
    labels = [roles.names[t.name] for t in trials]
    values = [t.metrics.mfu * 100 for t in trials]  # type: ignore[union-attr,operator]
    peak = results.peak
    caption = (
        f"Model FLOPs / step time / {peak.tflops:g} TFLOP/s ({peak.dtype}) for every trial; "
        "grey is the baseline, green the recommendation."
        if peak
        else "Model FLOPs utilization per trial."
    )
    figure = {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": labels,
                "x": values,
                "marker": {"color": [_trial_color(t.name, roles) for t in trials]},
                "text": [f"{v:.1f} %" for v in values],
                "textposition": "auto",
                "hovertemplate": "%{y}<br>MFU %{x:.2f} %<extra></extra>",
            }
        ],
        "layout": _layout("MFU (%)", "", height=_bar_height(len(trials)), yaxis=_axis("", autorange="reversed")),
    }
    return Chart(id="mfu", title="MFU per trial", caption=caption, figure=figure)


def throughput_chart(results: Results, roles: _Roles) -> Chart | None:
    trials = _ok(results)
    if not trials:
        return None
    use_tokens = all(t.metrics.tokens_per_s is not None for t in trials)  # type: ignore[union-attr]
    unit = "tokens/s" if use_tokens else "samples/s"
    values = [(t.metrics.tokens_per_s if use_tokens else t.metrics.samples_per_s) for t in trials]  # type: ignore[union-attr]
    figure = {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [roles.names[t.name] for t in trials],
                "x": values,
                "marker": {"color": [_trial_color(t.name, roles) for t in trials]},
                "hovertemplate": "%{y}<br>%{x:,.1f} " + unit + "<extra></extra>",
            }
        ],
        "layout": _layout(f"Throughput ({unit})", "", height=_bar_height(len(trials)), yaxis=_axis("", autorange="reversed")),
    }
    return Chart(id="throughput", title=f"Throughput per trial ({unit})", caption="Global samples (or tokens) per second of the measured steps.", figure=figure)


def step_breakdown_chart(results: Results, roles: _Roles) -> Chart | None:
    trials = _ok(results)
    if not trials:
        return None
    compute, wait, idle = [], [], []
    any_trace = False
    for t in trials:
        m = t.metrics
        step_ms = m.mean_step_time_s * 1e3  # type: ignore[union-attr]
        dw = min(max(m.data_wait_share, 0.0), 1.0)  # type: ignore[union-attr]
        # The trace's idle time includes the data wait (the device idles while the host waits), so only
        # the idle beyond it is shown as idle/sync: the three segments add up to the mean step (wall / steps).
        trace_idle = facts.idle_fraction(m.trace_facts) or facts.sync_fraction(m.trace_facts)  # type: ignore[union-attr]
        extra = max((trace_idle or 0.0) - dw, 0.0)
        any_trace = any_trace or trace_idle is not None
        wait.append(step_ms * dw)
        idle.append(step_ms * extra)
        compute.append(step_ms * max(1.0 - dw - extra, 0.0))
    labels = [roles.names[t.name] for t in trials]
    series = [("compute & other", compute, BLUE), ("data wait", wait, ORANGE)]
    if any_trace:
        series.append(("device idle / sync (trace)", idle, RED))
    figure = {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": labels,
                "x": values,
                "marker": {"color": color},
                "hovertemplate": "%{y}<br>" + name + ": %{x:.1f} ms<extra></extra>",
            }
            for name, values, color in series
        ],
        "layout": _layout(
            "Step time, wall / steps (ms)", "", height=_bar_height(len(trials)) + 30, barmode="stack", yaxis=_axis("", autorange="reversed")
        ),
    }
    caption = "The measured window's time per step (wall / steps) split into exposed data wait and the rest"
    caption += "; idle/sync comes from the profiler trace where one was taken." if any_trace else "."
    return Chart(id="step-breakdown", title="Step time per trial: data wait and the rest", caption=caption, figure=figure)


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
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [plotly_text(s.label) for s in slices],
                "x": [s.seconds * 1e3 for s in slices],
                "marker": {"color": [ORANGE if marks.get(s.key) else BLUE for s in slices]},
                "text": [text(s) for s in slices],
                "textposition": "auto",
                "cliponaxis": False,
                "hovertemplate": "%{y}: %{x:.2f} ms per step<extra></extra>",
            }
        ],
        "layout": _layout("Time per step (ms)", "", height=_bar_height(len(slices)), yaxis=_axis("", autorange="reversed"),
                          showlegend=False),
    }
    split = "no trace: not split further" if {s.key for s in slices} <= {"data_wait", "compute"} else "the profiler trace's proportions"
    return Chart(id="baseline-breakdown", title="Where the baseline's step time goes",
                 caption=f"The baseline's step ({trial}, {step_ms:.1f} ms = wall / steps) split into the exposed data wait "
                         f"and the rest ({split}). Orange bars are what a ranked fix acts on; each bar names those fixes (fix #N).",
                 figure=figure, wide=True)


def _capacity(results: Results) -> int | None:
    """The line memory is drawn against: the device's memory on a GPU, the host's on a CPU."""
    for t in _ok(results):
        if t.metrics and t.metrics.device_memory_capacity_bytes:
            return t.metrics.device_memory_capacity_bytes
    if results.environment.device_type != "cuda":
        return results.environment.host_memory_bytes
    return results.environment.device_memory_bytes


def micro_batch_charts(results: Results, roles: _Roles) -> list[Chart]:
    points = sorted(results.sweep.micro_batch if results.sweep else [], key=lambda p: p.micro_batch_size)
    if not points:
        return []
    ok = [p for p in points if p.status == "ok"]
    oom = [p for p in points if p.status == "oom"]
    capacity = _capacity(results)
    cuda = results.environment.device_type == "cuda"
    what = "allocator peak" if cuda else "host RSS"
    cap_what = "device capacity" if cuda else "host memory"
    xaxis = _axis("Micro-batch size (samples)", type="log", tickvals=[p.micro_batch_size for p in points], ticktext=[str(p.micro_batch_size) for p in points])

    def hover(p: Any) -> str:
        return f"{plotly_text(p.trial)}<br>micro-batch {p.micro_batch_size} × {p.grad_accum_steps} accumulation<br>{plotly_text(p.status)}"

    oom_marker = {"symbol": "x", "size": 13, "color": RED, "line": {"width": 2, "color": RED}}
    tp_ok = [p for p in ok if p.samples_per_s is not None]
    throughput = {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "throughput",
                "x": [p.micro_batch_size for p in tp_ok],
                "y": [p.samples_per_s for p in tp_ok],
                "text": [hover(p) for p in tp_ok],
                "hovertemplate": "%{text}<br>%{y:,.1f} samples/s<extra></extra>",
                "line": {"color": BLUE, "width": 2},
                "marker": {"size": 8},
            }
        ],
        "layout": _layout("", "Throughput (samples/s)", xaxis=xaxis, yaxis=_axis("Throughput (samples/s)", rangemode="tozero")),
    }
    if oom:
        throughput["data"].append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "out of memory",
                "x": [p.micro_batch_size for p in oom],
                "y": [0 for _ in oom],
                "text": [hover(p) for p in oom],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": oom_marker,
                "cliponaxis": False,  # the marker sits on the x axis, half of it would be cut
            }
        )
    mem_ok = [p for p in ok if p.peak_memory_bytes is not None]
    # MiB below a GiB: an axis in GiB with SI ticks reads "µGiB"/"mGiB" for small models.
    unit, scale = ("GiB", GIB) if max((p.peak_memory_bytes or 0) for p in points) >= GIB or (capacity or 0) >= GIB * 4 else ("MiB", MIB)
    memory_data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": f"peak memory ({what})",
            "x": [p.micro_batch_size for p in mem_ok],
            "y": [p.peak_memory_bytes / scale for p in mem_ok],  # type: ignore[operator]
            "text": [hover(p) for p in mem_ok],
            "hovertemplate": "%{text}<br>%{y:,.1f} " + unit + "<extra></extra>",
            "line": {"color": PURPLE, "width": 2},
            "marker": {"size": 8},
        }
    ]
    shapes, annotations = [], []
    if capacity:
        cap = capacity / scale
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": cap, "y1": cap, "line": {"color": RED, "dash": "dash", "width": 1.5}})
        annotations.append({"xref": "paper", "x": 0, "xanchor": "left", "y": cap, "yanchor": "bottom", "text": f"{cap_what} {capacity / GIB:.1f} GiB", "showarrow": False, "font": {"color": RED, "size": 11}})
    if oom:
        oom_y = capacity / scale if capacity else max((p.peak_memory_bytes or 0) / scale for p in points)
        memory_data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "out of memory",
                "x": [p.micro_batch_size for p in oom],
                "y": [oom_y for _ in oom],
                "text": [hover(p) for p in oom],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": oom_marker,
            }
        )
    memory = {
        "data": memory_data,
        "layout": _layout("", "", xaxis=xaxis, yaxis=_axis(f"Peak memory, {what} ({unit})", rangemode="tozero", tickformat=",.0f" if unit == "MiB" else ",.1f"),
                          shapes=shapes, annotations=annotations),
    }
    caption_oom = " Red crosses mark micro-batches that ran out of memory." if oom else ""
    return [
        Chart(id="mb-throughput", title="Throughput vs micro-batch", caption="Samples per second at each micro-batch size tried." + caption_oom, figure=throughput),
        Chart(id="mb-memory", title=f"Peak memory ({what}) vs micro-batch",
              caption=f"Peak memory ({'the caching allocator' + chr(39) + 's max allocated' if cuda else 'resident set size of the trial process'}) "
                      f"at each micro-batch size; the dashed line is the {cap_what}." + caption_oom, figure=memory),
    ]


def memory_breakdown_chart(results: Results, roles: _Roles) -> Chart | None:
    trials = [t for t in _ok(results) if t.metrics and t.metrics.memory_breakdown]
    if not trials:
        return None
    parts = [("parameters", "parameters", BLUE), ("gradients", "gradients", TEAL), ("optimizer_state", "optimizer state", PURPLE), ("activations_and_temporaries", "activations & temporaries", ORANGE)]
    labels = [roles.names[t.name] for t in trials]
    data = []
    for attr, name, color in parts:
        values = [getattr(t.metrics.memory_breakdown, attr) for t in trials]  # type: ignore[union-attr]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": labels,
                "x": [v / GIB if v is not None else None for v in values],
                "marker": {"color": color},
                "hovertemplate": "%{y}<br>" + name + ": %{x:.2f} GiB<extra></extra>",
            }
        )
    figure = {"data": data, "layout": _layout("Memory at the step's peak (GiB)", "", height=_bar_height(len(trials)) + 30, barmode="stack", yaxis=_axis("", autorange="reversed"))}
    return Chart(id="memory-breakdown", title="Memory breakdown", caption="Bytes by owner at the step's peak. Activations are the remainder and are missing where the peak was not measured.", figure=figure)


def _downsample(samples: Sequence[UtilizationSample], limit: int) -> list[UtilizationSample]:
    if len(samples) <= limit:
        return list(samples)
    stride = -(-len(samples) // limit)
    kept = list(samples[::stride])
    if kept[-1] is not samples[-1] and len(kept) < limit:
        kept.append(samples[-1])
    return kept[:limit]


def utilization_chart(results: Results, roles: _Roles) -> Chart | None:
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
    layout = _layout("", "", height=130 + 170 * len(panels))
    layout.pop("xaxis"), layout.pop("yaxis")
    for i, unit in enumerate(panels):
        suffix = "" if i == 0 else str(i + 1)
        top = 1 - i * (height + gap)
        # Utilization and power read best from zero; a clock's dips are invisible on a zero-based axis.
        layout[f"yaxis{suffix}"] = _axis(unit, domain=[top - height, top], rangemode="normal" if "MHz" in unit else "tozero")
        last = i == len(panels) - 1
        xaxis = _axis("Time since the measured steps began (s)" if last else "", anchor=f"y{suffix}", showticklabels=last)
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


def kernel_category_chart(results: Results, roles: _Roles) -> Chart | None:
    names = [n for n in (roles.baseline, roles.recommended) if n]
    series = []
    for n in names:
        t = results.trial(n)
        by_cat = facts.kernel_time_by_category(t.metrics.trace_facts) if t and t.metrics else {}
        if by_cat:
            series.append((n, by_cat))
    if not series:
        return None
    categories = sorted({c for _, d in series for c in d}, key=lambda c: -max(d.get(c, 0.0) for _, d in series))
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": roles.names[n],
            "y": [plotly_text(c) for c in categories],
            "x": [d.get(c, 0.0) * 1e3 for c in categories],
            "marker": {"color": _trial_color(n, roles) if len(series) > 1 else BLUE},
            "hovertemplate": "%{y}: %{x:.2f} ms<extra>" + roles.names[n] + "</extra>",
        }
        for n, d in series
    ]
    figure = {"data": data, "layout": _layout("Device time in the traced steps (ms)", "", height=_bar_height(len(categories)), barmode="group", yaxis=_axis("", autorange="reversed"), showlegend=len(series) > 1)}
    return Chart(id="kernel-categories", title="Kernel time by category", caption="Device time per kernel category over the profiled steps, from the trace.", figure=figure)


# ------------------------------------------------------------------------------------------ assembly


def gain_chart(results: Results) -> Chart | None:
    """The answer as a chart: every measured configuration's throughput ratio and interval against a 1.0 line.

    Ranked best first; slower and undecided configurations stay visible (red, grey, "n.s."). The gains are the
    ones the headline and the ranked fixes show (perfscope.report.story.gain_of).
    """
    sweep = results.sweep
    if sweep is None:
        return None
    rows = []
    for o in sweep.knobs:
        g = gain_of(results, o)
        if o.status not in ("measured", "rejected") or g is None:
            continue
        label = o.title + (f" · {o.setting}" if o.setting and o.setting not in o.title else "")
        rows.append((plotly_text(label), g, o.status == "rejected"))
    if sweep.recommended_gain is not None and len(sweep.recommended_knobs) > 1:
        rows.append((plotly_text("recommended: " + " + ".join(sweep.recommended_knobs)), sweep.recommended_gain, False))
    if not rows:
        return None
    rows.sort(key=lambda r: -r[1].ratio)

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
                "text": [f"{gain_words(g)}{verdict(g, rej)}" for _, g, rej in rows],
                "textposition": "top center",
                "hovertemplate": "%{y}<br>%{x:.2f}× the baseline's samples/s<extra></extra>",
                "cliponaxis": False,
            }
        ],
        "layout": _layout(
            "Throughput vs the baseline (×, log scale; bars: confidence interval)", "", height=_bar_height(len(rows)) + 20,
            xaxis=_axis("Throughput vs the baseline (×, log scale; bars: confidence interval)", type="log",
                        tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks]),
            yaxis=_axis("", autorange="reversed"),
            shapes=[{"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": 1, "x1": 1, "line": {"color": "#111827", "width": 1.5}}],
            showlegend=False,
        ),
    }
    return Chart(id="gains", title="Measured gains, best first",
                 caption="Each configuration measured in this run, as its throughput over the baseline's, with its confidence "
                         "interval; right of the 1.0 line is faster. Green: decidedly faster; red: slower; grey: no "
                         "significant change (n.s.).",
                 figure=figure, wide=True)


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
                 figure={"data": data, "layout": _layout("", "Time per step (ms)", barmode="group")}, wide=True)


def _empty(chart: Chart) -> bool:
    """No trace has a single value to draw."""
    return not any(v is not None for t in chart.figure.get("data", []) for v in (t.get("x") or []) + (t.get("y") or []))


def build_charts(results: Results, *, baseline: str | None, recommended: str | None) -> tuple[list[Chart], list[str]]:
    """(every chart the results have data for, in page order; one line per chart left out, saying why).

    No chart is drawn empty: a chart without data, and the GPU's charts on a CPU run, become a line of text.
    """
    roles = _Roles(baseline=baseline, recommended=recommended, names={t.name: plotly_text(t.name) for t in results.trials})
    charts: list[Chart | None] = [
        step_breakdown_chart(results, roles),
        mfu_chart(results, roles),
        throughput_chart(results, roles),
        memory_breakdown_chart(results, roles),
        *micro_batch_charts(results, roles),
        kernel_category_chart(results, roles),
        utilization_chart(results, roles),
    ]
    absent: list[str] = []
    if results.environment.device_type != "cuda":
        absent.append("GPU utilization, power and clock charts: not drawn, this run used no GPU"
                      + (" (the host CPU load is in the utilization timeline)." if any(c and c.id == "utilization" for c in charts) else "."))
    shown = []
    for c in charts:
        if c is None:
            continue
        if _empty(c):
            absent.append(f"{c.title}: not drawn, this run recorded no data for it.")
            continue
        shown.append(c)
    narrow = [c for c in shown if not c.wide]
    if len(narrow) % 2:  # the page lays charts out two per row: let the odd one out span the row
        narrow[-1].wide = True
    return shown, absent

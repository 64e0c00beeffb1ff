"""Per-trial bars: MFU, throughput, the step's data wait and the rest, memory by owner and by category, kernel time
by category; grey the baseline, green the recommendation.

Design notes: docs/report.md.
"""

from __future__ import annotations

from perfscope.report import facts
from perfscope.report.charts.base import (
    BLUE,
    GIB,
    MIB,
    ORANGE,
    PALETTE,
    PURPLE,
    RED,
    TEAL,
    Chart,
    Roles,
    axis_spec,
    bar_height,
    hbar,
    layout_spec,
    trial_color,
)
from perfscope.report.escaping import plotly_text
from perfscope.results import MEMORY_CATEGORY_NAMES, Results
from perfscope.rules._memory import peak_agreement


def mfu_chart(results: Results, roles: Roles) -> Chart | None:
    trials = [t for t in results.ok_trials() if t.metrics and t.metrics.mfu is not None]
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
        "data": [hbar(labels, values, [trial_color(t.name, roles) for t in trials], "%{y}<br>MFU %{x:.2f} %<extra></extra>",
                      text=[f"{v:.1f} %" for v in values], textposition="auto")],
        "layout": layout_spec("MFU (%)", "", height=bar_height(len(trials)), yaxis=axis_spec("", autorange="reversed")),
    }
    return Chart(id="mfu", title="MFU per trial", caption=caption, figure=figure)


def throughput_chart(results: Results, roles: Roles) -> Chart | None:
    trials = results.ok_trials()
    if not trials:
        return None
    use_tokens = all(t.metrics.tokens_per_s is not None for t in trials)  # type: ignore[union-attr]
    unit = "tokens/s" if use_tokens else "samples/s"
    values = [(t.metrics.tokens_per_s if use_tokens else t.metrics.samples_per_s) for t in trials]  # type: ignore[union-attr]
    figure = {
        "data": [hbar([roles.names[t.name] for t in trials], values, [trial_color(t.name, roles) for t in trials],
                      "%{y}<br>%{x:,.1f} " + unit + "<extra></extra>")],
        "layout": layout_spec(f"Throughput ({unit})", "", height=bar_height(len(trials)), yaxis=axis_spec("", autorange="reversed")),
    }
    return Chart(id="throughput", title=f"Throughput per trial ({unit})", caption="Global samples (or tokens) per second of the measured steps.", figure=figure)


def step_breakdown_chart(results: Results, roles: Roles) -> Chart | None:
    trials = results.ok_trials()
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
        "data": [hbar(labels, values, color, "%{y}<br>" + name + ": %{x:.1f} ms<extra></extra>", name=name)
                 for name, values, color in series],
        "layout": layout_spec(
            "Step time, wall / steps (ms)", "", height=bar_height(len(trials)) + 30, barmode="stack", yaxis=axis_spec("", autorange="reversed")
        ),
    }
    caption = "The measured window's time per step (wall / steps) split into exposed data wait and the rest"
    caption += "; idle/sync comes from the profiler trace where one was taken." if any_trace else "."
    return Chart(id="step-breakdown", title="Step time per trial: data wait and the rest", caption=caption, figure=figure)


def memory_breakdown_chart(results: Results, roles: Roles) -> Chart | None:
    trials = [t for t in results.ok_trials() if t.metrics and t.metrics.memory_breakdown]
    if not trials:
        return None
    parts = [("parameters", "parameters", BLUE), ("gradients", "gradients", TEAL), ("optimizer_state", "optimizer state", PURPLE), ("activations_and_temporaries", "activations & temporaries", ORANGE)]
    labels = [roles.names[t.name] for t in trials]
    data = [hbar(labels, [v / GIB if (v := getattr(t.metrics.memory_breakdown, attr)) is not None else None  # type: ignore[union-attr]
                          for t in trials], color, "%{y}<br>" + name + ": %{x:.2f} GiB<extra></extra>", name=name)
            for attr, name, color in parts]
    figure = {"data": data, "layout": layout_spec("Memory at the step's peak (GiB)", "", height=bar_height(len(trials)) + 30, barmode="stack", yaxis=axis_spec("", autorange="reversed"))}
    return Chart(id="memory-breakdown", title="Memory breakdown", caption="Bytes by owner at the step's peak. Activations are the remainder and are missing where the peak was not measured.", figure=figure)


def memory_categories_chart(results: Results, roles: Roles) -> Chart | None:
    trials = [t for t in results.ok_trials() if t.metrics and t.metrics.memory_categories]
    if not trials:
        return None
    held = [t.metrics.memory_categories for t in trials]  # type: ignore[union-attr]
    unit, scale = ("GiB", GIB) if max(h.peak_bytes for h in held) >= GIB else ("MiB", MIB)  # type: ignore[union-attr]
    categories = [c for c in MEMORY_CATEGORY_NAMES if any(h.at_peak.get(c) for h in held)]  # type: ignore[union-attr]
    labels = [roles.names[t.name] for t in trials]
    data = [hbar(labels, [h.at_peak.get(c, 0) / scale for h in held], PALETTE[i % len(PALETTE)],  # type: ignore[union-attr]
                 "%{y}<br>" + MEMORY_CATEGORY_NAMES[c] + ": %{x:.2f} " + unit + "<extra></extra>", name=MEMORY_CATEGORY_NAMES[c])
            for i, c in enumerate(categories)]
    figure = {"data": data, "layout": layout_spec(f"Memory at a profiled step's peak ({unit})", "", height=bar_height(len(trials)) + 30,
                                                  barmode="stack", yaxis=axis_spec("", autorange="reversed"))}
    cuda = results.environment.device_type == "cuda"
    said = [(t, a) for t in trials if (a := peak_agreement(t.metrics, cuda=cuda)) is not None]  # type: ignore[arg-type]
    shown = [(t, a) for t, a in said if a.agrees is not True] or said[:1]  # the disagreements, else one that agrees
    caption = "Bytes by what holds them at a profiled step's peak (torch.profiler's memory categories). " + " ".join(
        (f"{t.name}: " if len(trials) > 1 else "") + a.text[0].upper() + a.text[1:] + "." for t, a in shown)
    return Chart(id="memory-categories", title="Memory by category", caption=caption, figure=figure)


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

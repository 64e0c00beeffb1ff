"""Per-trial bars: MFU, throughput, the step's data wait and the rest, memory by owner; grey the baseline, green
the recommendation.
"""

from __future__ import annotations

from perfscope.report import facts
from perfscope.report.charts.base import (
    BLUE,
    GIB,
    ORANGE,
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
from perfscope.results import Results


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


"""Memory by category at a profiled step's peak, per trial, and what that peak is worth beside the allocator's.

Design notes: docs/report.md.
"""

from __future__ import annotations

from perfscope.report.charts.base import GIB, MIB, PALETTE, Chart, Roles, axis_spec, bar_height, hbar, layout_spec
from perfscope.results import MEMORY_CATEGORY_NAMES, Results
from perfscope.rules._memory import peak_agreement


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

"""The report of a trace the user brought (Results.source "trace"): what a trace can show, and that nothing ran.

    view = build_view(results)        # build_view calls adapt_for_trace for a trace's results

Why apart from the view: a trace's Results have one "trial" that nobody ran, no samples and no FLOP count, so
the headline rows a run fills (MFU, throughput, memory) would only say "n/a"; the lead sentence, the peak line and
the trials table say instead what the figures are (read from the trace) and that every finding is an estimate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfscope.report.format import NA
from perfscope.results import Results

if TYPE_CHECKING:
    from perfscope.report.view import ReportView

TRACE_LEAD = ("Read from a trace, with no rerun: nothing was measured, so every finding below is an estimate from the "
              "trace; step times are the trace's own, throughput and MFU are unknown (a trace has no batch and no FLOP count).")


def adapt_for_trace(view: ReportView, results: Results) -> None:
    """Headline without the rows a trace cannot fill, the lead saying the findings are estimates, the device's
    datasheet peaks for context, and "unknown" where the trials table would print a batch of 0."""
    h = view.headline
    if not h.message:
        h.rows = [row for row in h.rows if any(cell.text != NA for cell in row.values)]
        for cell in h.columns:
            cell.text = "Trace"
        h.lead = TRACE_LEAD
    env = results.environment
    if env.datasheet_peaks_tflops:
        peaks = ", ".join(f"{dtype} {tflops:g}" for dtype, tflops in env.datasheet_peaks_tflops.items())
        view.peak = f"datasheet {peaks} TFLOP/s"
        view.peak_source = f"{env.datasheet_source}; MFU is n/a: a trace has no FLOP count"
    else:
        view.peak = "unknown"
        view.peak_source = env.unavailable.get("datasheet_peaks_tflops", "a CPU has no datasheet peak here") + \
            "; MFU is n/a: a trace has no FLOP count"
    for row in view.trials:
        if row.batch.startswith("0 × "):
            row.batch = "unknown (not in a trace)"

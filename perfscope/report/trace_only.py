"""The report of a trace the user brought (Results.source "trace"): what a trace can show, and that nothing ran.

    view = build_view(results)        # for a trace's results, build_view asks the three functions below

Why apart from the view: a trace's Results have one "trial" that nobody ran, no samples and no FLOP count, so
the headline rows a run fills (MFU, throughput, memory) would only say "n/a"; the lead sentence, the peak line and
the trials table say instead what the figures are (read from the trace) and that every finding is an estimate.

Each function takes the one section it changes (the headline, the peak line, the trials table), typed by the
module that builds that section, never the assembled ReportView: the view imports this module, so this module
must not import the view back.
"""

from __future__ import annotations

from perfscope.report.format import NA
from perfscope.report.headline import Headline
from perfscope.report.tables import TrialRow
from perfscope.results import Environment, Results
from perfscope.wording import reason

TRACE_LEAD = ("Read from a trace, with no rerun: nothing was measured, so every finding below is an estimate from the "
              "trace; step times are the trace's own, throughput and MFU are unknown (a trace has no batch and no FLOP count).")


def trace_headline(h: Headline) -> None:
    """The headline without the rows a trace cannot fill, its column named "Trace", the lead saying the findings
    are estimates."""
    if h.message:
        return
    h.rows = [row for row in h.rows if any(cell.text != NA for cell in row.values)]
    for cell in h.columns:
        cell.text = "Trace"
    h.lead = TRACE_LEAD


def trace_peak(env: Environment) -> tuple[str, str]:
    """The peak line (peak, its source): the device's datasheet peaks for context, and why MFU is n/a."""
    if env.datasheet_peaks_tflops:
        peaks = ", ".join(f"{dtype} {tflops:g}" for dtype, tflops in env.datasheet_peaks_tflops.items())
        return f"datasheet {peaks} TFLOP/s", f"{env.datasheet_source}; MFU is n/a: a trace has no FLOP count"
    why = reason(env.unavailable, "datasheet_peaks_tflops", "a CPU has no datasheet peak here")
    return "unknown", why + "; MFU is n/a: a trace has no FLOP count"


def trace_trials(rows: list[TrialRow], results: Results) -> None:
    """"unknown" where the trials table would print a batch of 0 (a trace has no batch)."""
    unbatched = {t.name for t in results.trials if t.metrics is not None and t.metrics.micro_batch_size == 0}
    for row in rows:
        if row.name in unbatched:
            row.batch = "unknown (not in a trace)"

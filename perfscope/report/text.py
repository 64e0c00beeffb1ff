"""The terminal's view of a run: a table of runs and the answer, printed when `analyze` ends.

    print(summary_table(results)); print(answer_lines(results, report_path))
"""

from __future__ import annotations

from pathlib import Path

from perfscope.report.format import fmt_bytes
from perfscope.report.story import (
    alternative_line,
    build_story,
    closest_line,
    interval_words,
    noise_words,
    recommendation_line,
    reference_words,
)
from perfscope.report.view import build_view
from perfscope.results import Results
from perfscope.wording import words


def summary_table(results: Results) -> str:
    """One row per run: throughput (work / wall time), typical step, MFU, data wait, memory."""
    env = results.environment
    lines = [f"\n{results.workload.name} on {env.device_name} ({env.device_type})"]
    header = (f"{'run':<30} {'status':<9} {'samples/s':>10} {'typical step ms (p10-p90)':<26} "
              f"{'MFU':>7} {'data wait':>9} {'peak mem':>10}")
    lines += [header, "-" * len(header)]
    for t in results.trials:
        m = t.metrics
        if m is None or t.status not in ("ok", "nonfinite"):
            reason = (t.error or "").splitlines()[0][:60] if t.error else ""
            lines.append(f"{t.name:<30} {t.status:<9} {reason}")
            continue
        st = m.typical_step
        typical = f"{st.median * 1e3:.1f} ({st.p10 * 1e3:.1f}-{st.p90 * 1e3:.1f})" if st else "n/a"
        rate = f"{m.samples_per_s:.1f}" if m.samples_per_s is not None else "n/a"
        mfu = f"{m.mfu:.1%}" if m.mfu is not None else "n/a"
        status = "excluded" if t.excluded else t.status
        lines.append(f"{t.name:<30} {status:<9} {rate:>10} {typical:<26} {mfu:>7} {m.data_wait_share:>9.1%} "
                     f"{fmt_bytes(m.peak_memory_bytes):>10}")
    if results.peak is not None:
        lines.append(f"MFU against {results.peak.tflops:g} TFLOP/s ({results.peak.source})")
    return "\n".join(lines)


def answer_lines(results: Results, report_path: Path | None) -> str:
    """What to do, in the headline's words and numbers (perfscope.report.story), then where to read more."""
    lines = [""]
    lines += [f"warning: {words(w)}" for w in results.warnings]
    story = build_story(results)
    if story is not None:
        r = story.recommended
        lines.append(f"recommendation: {recommendation_line(story)}"
                     + (f" ({interval_words(r.gain)}; {reference_words(r.gain)})" if r else ""))
        if r is not None and r.caveats:
            lines.append(f"  changes: {'; '.join(r.caveats)}")
        if noise := noise_words(story.noise):
            lines.append(f"  {noise}")
        if story.alternative is not None:
            lines.append(alternative_line(story))
        if closest := closest_line(story):
            lines.append(f"  {closest}")
    if why := build_view(results).headline.why:  # the page's own line: the breakdown's largest slice and its fix
        lines.append(f"why slow: {why}")
    lines.append(f"results: {report_path.parent / 'results.json' if report_path else ''}".rstrip())
    if report_path is not None:
        lines.append(f"report:  {report_path}")
    return "\n".join(lines)

"""The terminal's view of a run: a table of runs and the answer, printed when `analyze` ends.

    print(summary_table(results)); print(answer_lines(results, report_path))
"""

from __future__ import annotations

from pathlib import Path

from perfscope.report.format import fmt_bytes
from perfscope.results import Results
from perfscope.results.roles import baseline_configuration, recommended_configuration


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
    """What to do, in two or three lines: the recommendation and its measured gain, then where to read more."""
    lines = [""]
    lines += [f"warning: {w}" for w in results.warnings]
    sweep = results.sweep
    recommended = recommended_configuration(results)
    if sweep is not None and recommended is not None:
        gain = sweep.recommended_gain
        if recommended == baseline_configuration(results) or gain is None:
            mde = f" (this machine resolves changes of about {sweep.noise.mde:.0%})" if sweep.noise and sweep.noise.mde else ""
            lines.append(f"recommendation: keep your configuration — nothing measured decidedly faster{mde}")
        else:
            knobs = ", ".join(sweep.recommended_knobs)
            lines.append(f"recommendation: {knobs} — {gain.ratio:.2f}× samples/s "
                         f"({gain.confidence:.0%} interval {gain.low:.2f}–{gain.high:.2f}, {gain.runs} runs vs {gain.reference_runs} baseline runs)")
    lines.append(f"results: {report_path.parent / 'results.json' if report_path else ''}".rstrip())
    if report_path is not None:
        lines.append(f"report:  {report_path}")
    return "\n".join(lines)

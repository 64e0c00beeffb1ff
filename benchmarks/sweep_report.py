"""Shared printing for the sweep benchmarks: the ranking and the recommendation from a results.json."""

from __future__ import annotations

from pathlib import Path

from perfscope.ranking import gain_of
from perfscope.report.reference import configuration_rate, gain_figures
from perfscope.results import Results


def print_ranking(results_path: Path) -> Results:
    results = Results.load(results_path)
    env, peak, sweep = results.environment, results.peak, results.sweep
    print(f"\ndevice: {env.device_name} ({env.device_type}); torch {env.torch_version}")
    if peak is not None:
        print(f"MFU denominator: {peak.tflops:g} TFLOP/s {peak.dtype} ({peak.source})")
    base = results.trial("baseline")
    if base is not None and base.ok:
        # The reference the recommendation's gain was computed against (report/reference.py), not the first run.
        m, gain = base.metrics, sweep.recommended_gain if sweep else None
        figures = gain_figures(results, gain, candidate=sweep.recommended_trial) if gain and sweep and sweep.recommended_trial else None
        kept = configuration_rate(results, base.configuration)
        rate, how = ((figures.reference_rate, figures.words) if figures else (kept[0], f"geometric mean of its {kept[1]} runs")
                     if kept else (m.samples_per_s, "first run"))
        k = rate / m.samples_per_s
        print(f"baseline: {m.mean_step_time_s / k * 1e3:.1f} ms/step, {rate:.1f} samples/s, MFU {_pct(m.mfu * k if m.mfu else None)} ({how})")
    if sweep is None:
        print("no sweep in these results")
        return results
    print(f"\n{'knob':<26} {'status':<13} {'gain':>7}  {'interval (99%)':<16} {'MFU':>7}  note  (* significant, n.s. not; ! changes training)")
    for o in sweep.knobs:
        g = gain_of(results, o)  # the recommendation's own gain for its knob: the figure the recommendation shows
        gain = f"{g.ratio:.3f}" if g else "-"
        interval = f"[{g.low:.3f}, {g.high:.3f}]" if g else ""
        sig = "" if not g else (" *" if g.significant else " n.s.")
        print(f"{o.knob:<26} {o.status:<13} {gain:>7}  {interval:<16} {_pct(o.mfu):>7}  {sig.strip()} {o.reason or ''}".rstrip())
        for caveat in o.changes_semantics:
            print(f"{'':<26}   ! {caveat}")
    rec = results.trial(sweep.recommended_trial) if sweep.recommended_trial else None
    print(f"\nrecommended: {sweep.recommended_trial} {sweep.recommended_knobs}")
    if rec is not None and rec.ok:
        m = rec.metrics
        gain = sweep.recommended_gain
        g = f"{gain.ratio:.3f}× [{gain.low:.3f}, {gain.high:.3f}]" if gain else "1.000× (the baseline)"
        figures = gain_figures(results, gain, candidate=rec.configuration) if gain else None
        k = figures.rate / m.samples_per_s if figures else 1.0  # the runs the gain rests on, not one of them
        print(f"  {m.mean_step_time_s / k * 1e3:.1f} ms/step, {m.samples_per_s * k:.1f} samples/s, "
              f"MFU {_pct(m.mfu * k if m.mfu else None)}, gain {g}")
    for note in sweep.notes:
        print(f"  note: {note}")
    print(f"sweep time {sweep.elapsed_s or 0:.1f} s; stopped early: {sweep.stopped_early or 'no'}")
    return results


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"

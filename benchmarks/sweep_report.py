"""Shared printing for the sweep benchmarks: the ranking and the recommendation from a results.json."""

from __future__ import annotations

from pathlib import Path

from perfscope.results import Results


def print_ranking(results_path: Path) -> Results:
    results = Results.load(results_path)
    env, peak, sweep = results.environment, results.peak, results.sweep
    print(f"\ndevice: {env.device_name} ({env.device_type}); torch {env.torch_version}")
    if peak is not None:
        print(f"MFU denominator: {peak.tflops:g} TFLOP/s {peak.dtype} ({peak.source})")
    base = results.trial("baseline")
    if base is not None and base.ok:
        m = base.metrics
        print(f"baseline: {m.mean_step_time_s * 1e3:.1f} ms/step, {m.samples_per_s:.1f} samples/s, MFU {_pct(m.mfu)}")
    if sweep is None:
        print("no sweep in these results")
        return results
    print(f"\n{'knob':<26} {'status':<13} {'gain':>7}  {'interval (99%)':<16} {'MFU':>7}  note  (* significant, n.s. not; ! changes training)")
    for o in sweep.knobs:
        gain = f"{o.gain.ratio:.3f}" if o.gain else "-"
        interval = f"[{o.gain.low:.3f}, {o.gain.high:.3f}]" if o.gain else ""
        sig = "" if not o.gain else (" *" if o.gain.significant else " n.s.")
        print(f"{o.knob:<26} {o.status:<13} {gain:>7}  {interval:<16} {_pct(o.mfu):>7}  {sig.strip()} {o.reason or ''}".rstrip())
        for caveat in o.changes_semantics:
            print(f"{'':<26}   ! {caveat}")
    rec = results.trial(sweep.recommended_trial) if sweep.recommended_trial else None
    print(f"\nrecommended: {sweep.recommended_trial} {sweep.recommended_knobs}")
    if rec is not None and rec.ok:
        m = rec.metrics
        gain = sweep.recommended_gain
        g = f"{gain.ratio:.3f}× [{gain.low:.3f}, {gain.high:.3f}]" if gain else "1.000× (the baseline)"
        print(f"  {m.mean_step_time_s * 1e3:.1f} ms/step, {m.samples_per_s:.1f} samples/s, MFU {_pct(m.mfu)}, gain {g}")
    for note in sweep.notes:
        print(f"  note: {note}")
    print(f"sweep time {sweep.elapsed_s or 0:.1f} s; stopped early: {sweep.stopped_early or 'no'}")
    return results


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"

"""The words of the CI gate's messages (perfscope.wording's templates, split off to keep one concept a module): why
nothing was compared (GateError.message) and each metric's verdict line (Verdict.message), for `perfscope check`
and `perfscope ab`.

    words(msg("gate_no_evidence"))   # perfscope.wording.words: WORDING holds these
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfscope.stats import confidence_text
from perfscope.wording._text import join_parts


def _no_run(*, role: str, configuration: str, known: list[str]) -> str:
    return f"the {role} results have no run of {configuration!r} (configurations: {', '.join(known) or 'none'})"


def _run_failed(*, title: str, role: str, name: str, status: str, error: str | None = None) -> str:
    return f"{title}: {role} run {name!r} ended {status}" + (f": {error}" if error else "")


_WHY = {
    "regression": "worse than the {tolerance}",
    "pass": "within the {tolerance}",
    "within_noise": "past the {tolerance}, but within {noise}",
    "drop_not_excluded": "the interval reaches past the {tolerance}: a drop larger than it is not excluded",
}
"""A verdict's ``outcome`` (perfscope.check.decision.judge) in words."""


def _verdict(*, outcome: str, title: str, change: float, low: float, high: float, confidence: float, runs: str,
             max_drop: float, resolves: float | None = None, decides: str | None = None,
             across_sessions: bool = False) -> str:
    """The change, its interval and the runs it rests on, then the outcome and (undecided) what would decide it."""
    head = f"{title} {change:+.1%} ({confidence_text(confidence)} interval {low:+.1%} .. {high:+.1%}; {runs})"
    tail = (f" (it resolves changes of about {resolves:.0%})" if resolves is not None else "") + (
        f"; {decides}" if decides else "")
    noise = "the noise between sessions" if across_sessions else "this machine's run-to-run noise"
    return f"{head}: {_WHY[outcome].format(tolerance=f'{max_drop:.1%} tolerance', noise=noise)}{tail}"


def _runs_compared(*, current: int, baseline: int, basis: str | list[str] | None = None) -> str:
    """``basis``: what the spread between sessions rests on (perfscope.check.sessions.SessionSpread.how)."""
    return f"{current} vs {baseline} runs" + (f"; {join_parts(basis)}" if basis else "")


_SPREAD = {"session": ("between-session", "stored sessions"), "host": ("between-host spread", "hosts")}
"""A spread's ``unit`` in words: how it is named when stated, what its estimate is counted over."""


def _difference(*, what: str, baseline: str, current: str, hint: str | None = None) -> str:
    text = f"{what}: baseline {baseline}, current {current}"
    return f"{text} ({hint})" if hint else text


def _power(*, max_drop: float, power: float, needed: int | None = None, target: float = 0.8) -> str:
    text = f"power at the {max_drop:.0%} tolerance {power:.0%}"
    return text + (f"; --rounds {needed} would reach {target:.0%} at this noise" if needed is not None else "")


CHECK: dict[str, str | Callable[..., Any]] = {
    # why nothing was compared (GateError.message; perfscope.check.gate, perfscope.ab)
    "gate_no_recommendation": "the {role} results have no sweep-recommended configuration (--trial recommended)",
    "gate_no_run": _no_run,
    "gate_baseline_failed": ("baseline run {name!r} did not succeed (status {status}: {error}); record a new baseline "
                             "with `perfscope baseline update`"),
    "gate_structure_not_compared": lambda *, notes: "--fail-on-structure: " + "; ".join(notes),
    "gate_no_evidence": "the baseline has no run usable as evidence (all excluded or failed)",
    "gate_metric_unavailable": "{metric}: {error}",
    # why a metric cannot be gated (the error of gate_metric_unavailable; perfscope.check.metrics.MetricUnavailable)
    "metric_run_no_metrics": "run {name!r} has no metrics (status {status})",
    "metric_run_no_window": "run {name!r} has no timed window (wall {wall_s!r} s, {steps} steps)",
    "metric_values_invalid": "{title}: non-positive or non-finite run values {values}",
    "mfu_no_flop_count": lambda *, why=None: (
        f"MFU unavailable ({why or 'no FLOP count recorded'}); gate on --metric samples_per_s or step_time instead"),
    "mfu_no_peak": ("MFU unavailable (no peak FLOP/s recorded); re-run analyze with --peak-tflops, or gate on --metric "
                    "samples_per_s"),
    "job_step_rate_unknown": lambda *, why=None: "the job's step rate is unknown (" + (why or "a rank's window is missing") + ")",
    "samples_per_s_unavailable": lambda *, why=None: (
        f"samples/s unavailable ({why or 'not recorded'}); gate on --metric step_time instead"),
    "ab_baseline_failed": "the baseline revision's run {name!r} ended {status}: {error}",
    # a metric's verdict (Verdict.message; perfscope.check.decision: check's and ab's)
    "verdict": _verdict,
    "verdict_run_failed": _run_failed,
    "verdict_no_runs": "{title}: no runs to compare",
    "verdict_too_few_runs": ("{title}: {baseline} baseline run(s) and {current} current run(s) cannot separate a "
                             "regression from this machine's run-to-run noise; save a baseline of several runs "
                             "(`perfscope analyze --repeat 5`, then `perfscope baseline save`) and check current runs "
                             "from `--repeat 3`"),
    "verdict_no_interval": "{title}: no interval: {why}",
    "verdict_with_structure": "{verdict}; {structure}",
    "ab_no_evidence": ("{title}: no run of one side counts as evidence (each was failed or measured under load, see "
                       "the notes): nothing to decide on; run on a quiet machine"),
    "ab_no_interval": "{title} {change:+.1%}: no interval from {runs} candidate run(s); {power}",
    # the pieces of a verdict line: the runs it rests on, the power, what would decide it
    "runs_compared": _runs_compared,
    "runs_interleaved": "{candidate} candidate runs interleaved with {baseline} baseline runs; {power}",
    "power_at_tolerance": _power,
    "power_unknown": "power at the tolerance unknown (no interval); use more --rounds",
    "runs_per_side_decide": "about {runs} runs per side would decide it at this noise",
    "more_runs_decide": "more runs on both sides would decide it",
    "decide_new_host": ("the history has not seen this host: store sessions from {hosts} hosts, state "
                        "--between-host, or use `perfscope ab` (both revisions on this runner)"),
    "decide_assumed_spread": ("{sessions} stored session(s) cannot estimate the spread between days: store {needed} "
                              "(`perfscope baseline update`), state --between-session, or use `perfscope ab`"),
    "decide_more_sessions": "more stored sessions (`perfscope baseline update`), more runs, or `perfscope ab` would decide it",
    # what the spread between sessions and hosts rests on (perfscope.check.sessions.SessionSpread.how, .refusal)
    "spread_stated": lambda *, unit, value: f"{_SPREAD[unit][0]} {value:.1%} (stated)",
    "spread_estimated": lambda *, unit, units, df, sd: (
        f"between-{unit} spread from {units} {_SPREAD[unit][1]} ({df} df): about {sd:.1%}"),
    "host_spread_above_default": "between-host spread {sd:.1%} observed, above the default",
    "host_spread_assumed": "between-host spread assumed {default:.0%} (default: {hosts} hosts cannot estimate it; {needed} can)",
    "session_spread_assumed": ("between-session spread assumed {sd:.0%} ({sessions} stored session(s) cannot estimate it: "
                               "{needed} on one host can, or state --between-session)"),
    "host_not_in_history": lambda *, host, hosts, spread: f"{host or 'this host'} is not in the history ({hosts} host(s)): {spread}",
    "run_noise_unknown": "no session has two runs: the run-to-run noise is unknown",
    # a property the two sides do not share (perfscope.check.compat.Difference), and what it does
    "difference": _difference,
    "difference_change": "{what} {baseline} → {current}",
    "not_comparable": lambda *, changes: (
        f"not comparable: {'; '.join(changes)}: the baseline's history cannot judge this change of machine; gate with "
        "`perfscope ab` on this runner, record a baseline here (`perfscope baseline update --replace`), or pass "
        "--allow-mismatch"),
    "runs_not_comparable": "the runs are not comparable (pass --allow-mismatch to compare anyway):",
    "hint_not_recorded": "not recorded in one file",
    "hint_workload_changed": "the workload file changed; gate a fixed benchmark workload, or pass --allow-mismatch",
    "hint_world_size": ("a job's throughput is every rank's samples: compare runs of the same torchrun --nnodes × "
                        "--nproc-per-node, or pass --allow-mismatch"),
    "hint_batch_size": "another batch size changes every per-step number",
    "hint_peak": ("a measured ceiling varies run to run: pass the same --peak-tflops to both analyze runs, or gate on "
                  "--metric samples_per_s"),
    "hint_flops": "MFU is not proportional to throughput across different FLOP counts",
    "hint_cpu_cores": "fewer cores slow the data path, the host side and CPU ops: gate on runners of one size",
    "hint_cpu_model": "the host CPU feeds the device and runs the data path",
    "hint_torch": "a torch upgrade moves performance by itself: re-record the baseline (`perfscope baseline update --replace`)",
    "hint_cuda": "another CUDA build of torch picks other kernels",
    "hint_driver": "drivers change clocks, power management and kernels",
    "hint_host": "another machine of the same kind: its offset is what the between-session spread covers",
    "hint_gpu_uuid": "another physical GPU of the same model (power cap, clocks): covered by the between-session spread",
}

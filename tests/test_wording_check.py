"""The words of the CI gate's messages (perfscope.wording.check): one case per template, so a template's words change
only on purpose, and each output (terminal, Markdown, JUnit) shows a verdict's and an error's words; tests elsewhere
assert codes."""

from __future__ import annotations

import pytest

from perfscope.check import GateOptions, run_gate
from perfscope.check.render import render_junit, render_markdown, render_table
from perfscope.results.messages import Message, msg
from perfscope.wording import words
from perfscope.wording.check import CHECK
from tests.factories import make_results, make_runs

RUNS = msg("runs_compared", current=5, baseline=5, basis=None)
POWER = msg("power_at_tolerance", max_drop=0.05, power=0.41, needed=14, target=0.8)
INTERVAL = dict(confidence=0.95, max_drop=0.05)

CASES: list[tuple[Message, str]] = [
    (msg("gate_no_recommendation", role="baseline"),
     'the baseline results have no sweep-recommended configuration (--trial recommended)'),
    (msg("gate_no_run", role="current", configuration="amp_bf16", known=["baseline", "compile"]),
     "the current results have no run of 'amp_bf16' (configurations: baseline, compile)"),
    (msg("gate_no_run", role="current", configuration="amp_bf16", known=[]),
     "the current results have no run of 'amp_bf16' (configurations: none)"),
    (msg("gate_baseline_failed", name="baseline", status="crashed", error="RuntimeError: boom"),
     ("baseline run 'baseline' did not succeed (status crashed: RuntimeError: boom); record a new baseline "
      'with `perfscope baseline update`')),
    (msg("gate_structure_not_compared", notes=[msg("no_fingerprint", side="baseline")]),
     ('--fail-on-structure: the baseline has no structural fingerprint (recorded by an older perfscope, or '
      'counting failed)')),
    (msg("gate_no_evidence"),
     'the baseline has no run usable as evidence (all excluded or failed)'),
    (msg("gate_metric_unavailable", metric="mfu", error="MFU unavailable (no peak FLOP/s recorded)"),
     'mfu: MFU unavailable (no peak FLOP/s recorded)'),
    (msg("ab_baseline_failed", name="baseline-r1", status="oom", error="CUDA out of memory"),
     "the baseline revision's run 'baseline-r1' ended oom: CUDA out of memory"),
    (msg("verdict", outcome="regression", title="MFU", change=-0.2, low=-0.22, high=-0.18, runs=RUNS, **INTERVAL),
     'MFU -20.0% (95% interval -22.0% .. -18.0%; 5 vs 5 runs): worse than the 5.0% tolerance'),
    (msg("verdict", outcome="pass", title="MFU", change=0.01, low=-0.01, high=0.03, runs=RUNS, **INTERVAL),
     'MFU +1.0% (95% interval -1.0% .. +3.0%; 5 vs 5 runs): within the 5.0% tolerance'),
    (msg("verdict", outcome="within_noise", title="step time", change=0.1, low=-0.05, high=0.27, **INTERVAL,
         runs=msg("runs_compared", current=3, baseline=5, basis="between-session 1.0% (stated)"), resolves=0.21,
         decides=msg("decide_more_sessions"), across_sessions=True),
     ('step time +10.0% (95% interval -5.0% .. +27.0%; 3 vs 5 runs; between-session 1.0% (stated)): past the '
      '5.0% tolerance, but within the noise between sessions (it resolves changes of about 21%); more stored '
      'sessions (`perfscope baseline update`), more runs, or `perfscope ab` would decide it')),
    (msg("verdict", outcome="drop_not_excluded", title="samples/s", change=0.0, low=-0.08, high=0.09, **INTERVAL,
         runs=msg("runs_interleaved", candidate=8, baseline=8, power=POWER)),
     ('samples/s +0.0% (95% interval -8.0% .. +9.0%; 8 candidate runs interleaved with 8 baseline runs; power '
      'at the 5% tolerance 41%; --rounds 14 would reach 80% at this noise): the interval reaches past the '
      '5.0% tolerance: a drop larger than it is not excluded')),
    (msg("verdict_run_failed", title="MFU", role="current", name="baseline", status="oom", error=None),
     "MFU: current run 'baseline' ended oom"),
    (msg("verdict_run_failed", title="samples/s", role="candidate", name="candidate", status="crashed",
         error="RuntimeError: boom"),
     "samples/s: candidate run 'candidate' ended crashed: RuntimeError: boom"),
    (msg("verdict_no_runs", title="MFU"),
     'MFU: no runs to compare'),
    (msg("verdict_too_few_runs", title="MFU", baseline=1, current=1),
     ("MFU: 1 baseline run(s) and 1 current run(s) cannot separate a regression from this machine's "
      'run-to-run noise; save a baseline of several runs (`perfscope analyze --repeat 5`, then `perfscope '
      'baseline save`) and check current runs from `--repeat 3`')),
    (msg("verdict_no_interval", title="MFU", why="no session has two runs: the run-to-run noise is unknown"),
     'MFU: no interval: no session has two runs: the run-to-run noise is unknown'),
    (msg("verdict_with_structure", verdict=msg("verdict_no_runs", title="MFU"),
         structure="structural changes: +1 host sync per step"),
     'MFU: no runs to compare; structural changes: +1 host sync per step'),
    (msg("ab_no_evidence", title="samples/s"),
     ('samples/s: no run of one side counts as evidence (each was failed or measured under load, see the '
      'notes): nothing to decide on; run on a quiet machine')),
    (msg("ab_no_interval", title="samples/s", change=-0.2, runs=1, power=msg("power_unknown")),
     ('samples/s -20.0%: no interval from 1 candidate run(s); power at the tolerance unknown (no interval); '
      'use more --rounds')),
    (RUNS,
     '5 vs 5 runs'),
    (msg("runs_compared", current=3, baseline=10, basis="between-session spread from 10 stored sessions (9 df): about 1.2%"),
     '3 vs 10 runs; between-session spread from 10 stored sessions (9 df): about 1.2%'),
    (msg("runs_interleaved", candidate=8, baseline=8, power=POWER),
     ('8 candidate runs interleaved with 8 baseline runs; power at the 5% tolerance 41%; --rounds 14 would '
      'reach 80% at this noise')),
    (POWER,
     'power at the 5% tolerance 41%; --rounds 14 would reach 80% at this noise'),
    (msg("power_at_tolerance", max_drop=0.05, power=0.93, needed=None, target=0.8),
     'power at the 5% tolerance 93%'),
    (msg("power_unknown"),
     'power at the tolerance unknown (no interval); use more --rounds'),
    (msg("runs_per_side_decide", runs=12),
     'about 12 runs per side would decide it at this noise'),
    (msg("more_runs_decide"),
     'more runs on both sides would decide it'),
    (msg("decide_new_host", hosts=5),
     ('the history has not seen this host: store sessions from 5 hosts, state --between-host, or use '
      '`perfscope ab` (both revisions on this runner)')),
    (msg("decide_assumed_spread", sessions=1, needed=5),
     ('1 stored session(s) cannot estimate the spread between days: store 5 (`perfscope baseline update`), '
      'state --between-session, or use `perfscope ab`')),
    (msg("decide_more_sessions"),
     'more stored sessions (`perfscope baseline update`), more runs, or `perfscope ab` would decide it'),
    (msg("difference", what="device name", baseline="'A100'", current="'H100'", hint=None),
     "device name: baseline 'A100', current 'H100'"),
    (msg("difference", what="torch version", baseline="'2.4.0'", current="'2.5.1'", hint=msg("hint_torch")),
     ("torch version: baseline '2.4.0', current '2.5.1' (a torch upgrade moves performance by itself: re-record the "
      'baseline (`perfscope baseline update --replace`))')),
    (msg("difference_change", what="usable CPU cores (affinity, cgroup quota)", baseline="2.0", current="4.0"),
     'usable CPU cores (affinity, cgroup quota) 2.0 → 4.0'),
    (msg("not_comparable", changes=[msg("difference_change", what="device name", baseline="'A'", current="'B'")]),
     ("not comparable: device name 'A' → 'B': the baseline's history cannot judge this change of machine; gate with "
      '`perfscope ab` on this runner, record a baseline here (`perfscope baseline update --replace`), or pass '
      '--allow-mismatch')),
    (msg("runs_not_comparable"),
     'the runs are not comparable (pass --allow-mismatch to compare anyway):'),
    (msg("hint_not_recorded"),
     'not recorded in one file'),
    (msg("hint_workload_changed"),
     'the workload file changed; gate a fixed benchmark workload, or pass --allow-mismatch'),
    (msg("hint_world_size"),
     ("a job's throughput is every rank's samples: compare runs of the same torchrun --nnodes × --nproc-per-node, or pass "
      '--allow-mismatch')),
    (msg("hint_batch_size"),
     'another batch size changes every per-step number'),
    (msg("hint_peak"),
     ('a measured ceiling varies run to run: pass the same --peak-tflops to both analyze runs, or gate on --metric '
      'samples_per_s')),
    (msg("hint_flops"),
     'MFU is not proportional to throughput across different FLOP counts'),
    (msg("hint_cpu_cores"),
     'fewer cores slow the data path, the host side and CPU ops: gate on runners of one size'),
    (msg("hint_cpu_model"),
     'the host CPU feeds the device and runs the data path'),
    (msg("hint_torch"),
     'a torch upgrade moves performance by itself: re-record the baseline (`perfscope baseline update --replace`)'),
    (msg("hint_cuda"),
     'another CUDA build of torch picks other kernels'),
    (msg("hint_driver"),
     'drivers change clocks, power management and kernels'),
    (msg("hint_host"),
     'another machine of the same kind: its offset is what the between-session spread covers'),
    (msg("hint_gpu_uuid"),
     'another physical GPU of the same model (power cap, clocks): covered by the between-session spread'),
]


@pytest.mark.parametrize(("message", "said"), CASES, ids=[m.code for m, _ in CASES])
def test_each_template_says_what_it_said_as_prose(message: Message, said: str) -> None:
    assert words(message) == said


def test_every_check_template_has_a_case() -> None:
    assert set(CHECK) == {m.code for m, _ in CASES}


@pytest.mark.parametrize("render", [render_table, render_markdown, render_junit])
def test_each_output_shows_the_verdicts_and_the_errors_words(render) -> None:
    base = make_results(make_runs(runs=5, seed=1))
    slower = run_gate(make_results(make_runs(runs=5, median_s=0.125, seed=2)), base, GateOptions(between_session=0.0))
    (verdict,) = slower.verdicts
    assert verdict.status == "regression" and words(verdict.message) in render(slower)
    missing = run_gate(base, base, GateOptions(trial="amp_bf16"))
    said = words(msg("gate_no_run", role="baseline", configuration="amp_bf16", known=["baseline"]))
    assert missing.errors[0].message.code == "gate_no_run" and said in render(missing)


@pytest.mark.parametrize("render", [render_table, render_markdown, render_junit])
def test_each_output_shows_a_refusing_differences_words(render) -> None:
    base = make_results(make_runs(runs=5, seed=1))
    cur = make_results(make_runs(runs=5, seed=2))
    cur.environment.torch_version = "9.9.9"
    report = run_gate(cur, base, GateOptions(between_session=0.0))
    (difference,) = report.blocking_differences
    assert report.outcome == "not_comparable" and difference.hint == msg("hint_torch")
    shown = render(report)
    assert words(msg("not_comparable", changes=[difference.change])) in shown.replace("&gt;", ">")
    assert words(difference.message) in shown

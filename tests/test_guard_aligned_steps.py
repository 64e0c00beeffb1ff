"""The numerics guard compares the same samples after the same number of updates, whatever ran before the window.

The workload is examples/data_bound_varied_loss.py (written for this, not tuned to pass): four classes stored in runs
of 24 samples, so batch after batch the loss jumps (1.1, 2.1, 1.9, 1.1 ...); SGD; each sample costs a storage read and
Python decoding. With DataLoader workers a trial drains its prefetch queue before its window, so its window opens at
a later global step than the baseline's: comparing measured step n with measured step n compared different batches
and rejected correct configurations. The tests decide on the guard's verdicts and the global steps they compared
(counts load cannot move); the one timing decision (workers recommended) rests on the 3–5× the sample's read latency
makes possible (workers overlap it whatever the cores; measured 5.0×, 99% CI 2.0–12.4, with 4 workers on this loaded
2-core machine). Whether persistent workers or a deeper prefetch add to the workers is a timing question this workload
does not make certain (each epoch is 64 batches, longer than a window): the test asks only that the guard accepts them.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from perfscope.knobs import Knob, KnobContext, registered
from perfscope.pipeline import finish
from perfscope.results import ModelFacts, Results, Trial, TrialMetrics
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.search.numerics import TOLERANCE, compare_numerics
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from perfscope.wording import words
from perfscope.workload import load_workload
from tests.factories import make_environment, make_results
from tests.in_process import InProcessSession

WORKLOAD = Path(__file__).parents[1] / "examples" / "data_bound_varied_loss.py"
WARMUP, STEPS = 2, 6
BASE = TrialConfig(device="cpu", micro_batch_size=16, warmup_steps=WARMUP, min_window_s=0.3, min_steps=STEPS,
                   count_flops=False, sample_utilization=False)
"""Windows calibrated as in `perfscope analyze` (with workers: several fill-and-drain cycles of the queue), shorter."""
MODEL = ModelFacts(parameter_count=4420, has_conv2d=False, repeated_blocks=0, optimizer_class="SGD")
WORKER_KNOBS = ["dataloader_workers", "persistent_workers", "prefetch_factor"]


class _Scaler:
    """A GradScaler that scales the loss and never unscales: the gradients (and every update) are 4× too large."""

    def scale(self, loss: Any) -> Any:
        return loss * 4.0

    def unscale_(self, optimizer: Any) -> None:
        pass

    def step(self, optimizer: Any) -> None:
        optimizer.step()

    def update(self) -> None:
        pass


class _Broken(Knob):
    """A throwaway knob (its setting in ``knob_settings``) that keeps the speed and breaks the training."""

    change = ""

    def code_change(self, ctx: KnobContext) -> str | None:
        return self.change

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"knob_settings": {self.id: True}}]

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return []


class WrongLossScale(_Broken):
    id = "wrong_loss_scale"
    title = "a loss scaler that never unscales"
    reference = "https://example.invalid/wrong-loss-scale"
    change = "+loss = scaler.scale(loss)   # and never scaler.unscale_(optimizer)"

    def grad_scaler(self, config: TrialConfig) -> Any | None:
        return _Scaler()


class ShuffledOrder(_Broken):
    id = "shuffled_order"
    title = "a loader that shuffles"
    reference = "https://example.invalid/shuffled-order"
    change = "+loader = DataLoader(ds, batch_size=B, shuffle=True)"

    def apply_to_loader(self, config: TrialConfig) -> dict[str, Any]:
        return {"shuffle": True}


def _sweep(only: list[str], knobs: list[Knob] = (), **options: Any) -> tuple[Sweeper, InProcessSession]:
    workload = load_workload(WORKLOAD)
    environment = make_environment("cpu")
    environment.cpu_cores_logical = 4
    session = InProcessSession(workload, environment)
    ctx = KnobContext(workload=workload, base=BASE, environment=environment, model=MODEL)
    with ExitStack() as stack:
        for knob in knobs:
            stack.enter_context(registered(knob))
        session.measure(BASELINE, BASE)
        sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(only=only, order_seed=0, trace_recommended=False,
                                                                         **options))
        session.results.sweep = sweeper.run()
    return sweeper, session


def _first_run(session: InProcessSession, outcome_trial: str | None) -> Trial:
    return next(t for t in session.results.trials if t.configuration == outcome_trial)


@pytest.mark.slow
def test_worker_options_pass_the_guard_at_the_same_global_steps_and_workers_are_recommended(tmp_path):
    sweeper, session = _sweep(WORKER_KNOBS, max_runs=5)
    finish(session.results, tmp_path)  # rules and report, as `perfscope analyze` ends
    baseline = session.results.trials[0]
    outcomes = {o.knob: o for o in sweeper.sweep.knobs}
    shown = []
    for knob in WORKER_KNOBS:
        outcome = outcomes[knob]
        assert outcome.status == "measured" and outcome.gain is not None, outcome
        run = _first_run(session, outcome.trial)
        check = run.numerics
        assert check is not None and check.ok and check.method == "step by step" and check.global_steps, check
        # the guard compared the steps both runs took after both warm-ups: the baseline's whole window
        last = WARMUP + min(len(baseline.metrics.losses), len(run.metrics.losses_before_window) + len(run.metrics.losses) - WARMUP) - 1
        assert (check.first_step, check.last_step, check.samples_per_step) == (WARMUP, last, 16)
        assert check.message in outcome.reason  # the knob table shows what the guard compared
        shown.append(check.message)
        # the run drained its prefetch queue first: its window opened later than the baseline's, and comparing
        # measured step n with measured step n (what the guard did before) would have compared other batches
        assert len(run.metrics.losses_before_window) > WARMUP
        index_diffs = [abs(c - b) / b for b, c in zip(baseline.metrics.losses, run.metrics.losses)]
        assert max(index_diffs) > 5 * TOLERANCE["fp32"], index_diffs
    # no configuration trained differently: no "non-finite or diverging loss" finding; the report says what was compared
    assert "PS601" not in {f.rule_id for f in session.results.findings}
    report = (tmp_path / "report.md").read_text()
    assert all(words(said) in report for said in shown)  # the numerics verdict's words reach the page
    assert "dataloader_workers" in sweeper.sweep.recommended_knobs, [(o.knob, o.gain) for o in sweeper.sweep.knobs]


def test_the_guard_rejects_a_wrong_loss_scale_and_another_data_order():
    sweeper, session = _sweep(["wrong_loss_scale", "shuffled_order"], [WrongLossScale(), ShuffledOrder()], max_runs=1)
    outcomes = {o.knob: o for o in sweeper.sweep.knobs}
    for knob in ("wrong_loss_scale", "shuffled_order"):
        outcome = outcomes[knob]
        assert outcome.status == "rejected" and outcome.reason[0].code == "numerics_rejected", outcome
        check = _first_run(session, outcome.trial).numerics
        assert check is not None and not check.ok and check.global_steps and check.first_step == WARMUP
    # another order: other samples at the compared steps, far outside the tolerance
    assert outcomes["shuffled_order"].reason[0].params["reason"].code == "numerics_step_loss"
    shuffled = _first_run(session, outcomes["shuffled_order"].trial).numerics
    assert shuffled is not None and shuffled.max_relative_diff > 5 * TOLERANCE["fp32"]
    assert sweeper.sweep.recommended_trial == BASELINE
    # every run also timed the collector in its window, step by step (what PS602 needs before it names it)
    m = session.results.trials[0].metrics
    assert m.gc_pause_s is not None and len(m.step_gc_pause_s) == len(m.step_times_s) == m.steps


def _metrics(losses: list[float], before: list[float] | None, *, warmup: int = WARMUP) -> TrialMetrics:
    return TrialMetrics(steps=len(losses), warmup_steps=warmup, micro_batch_size=16, grad_accum_steps=1,
                        samples_per_step=16, windows=[], samples_per_s=100.0, wall_s=1.0, data_wait_share=0.0,
                        host_data_wait_share=0.0, losses=list(losses), losses_before_window=before, first_grad_norm=1.0)


def _trial(name: str, metrics: TrialMetrics) -> Trial:
    return Trial(name=name, config=BASE, status="ok", metrics=metrics)


SERIES = [1.35, 1.24, 1.12, 2.12, 1.85, 1.11, 1.32, 1.52, 1.57, 1.65, 1.18, 0.73, 1.29, 1.50]
"""A run's loss at global steps 0, 1, 2 ...: batch after batch it jumps."""


def test_a_run_whose_window_opens_later_is_compared_at_the_same_global_steps(tmp_path):
    base = _trial(BASELINE, _metrics(SERIES[2:8], SERIES[:2]))
    drained = _trial("dataloader_workers", _metrics(SERIES[7:13], SERIES[:7]))  # 5 more steps before its window
    verdict = compare_numerics(base, drained)
    assert verdict.ok and verdict.max_relative_loss_diff == 0.0
    check = verdict.check
    assert check is not None and (check.first_step, check.last_step, check.global_steps) == (2, 7, True)
    said = check.message
    assert said.code == "numerics_within" and said.params["method"] == "step by step" and said.params["diff"] == 0.0
    assert said.params["tolerance"] == 0.02 and said.params["steps"] == msg("numerics_steps", first=2, last=7,
                                                                            global_steps=True, samples_per_step=16)
    # another data order: the same steps, other batches
    other = _trial("shuffled", _metrics([SERIES[3], SERIES[2], *SERIES[4:8]], SERIES[:2]))
    rejected = compare_numerics(base, other)
    assert not rejected.ok and rejected.reason is not None and rejected.reason.code == "numerics_step_loss"
    assert rejected.reason.params["step"] == 2 and rejected.reason.params["global_steps"]
    assert (round(rejected.reason.params["loss"], 2), round(rejected.reason.params["baseline"], 2)) == (2.12, 1.12)
    assert round(rejected.reason.params["diff"], 3) == 0.893
    # the record travels with the run
    drained.numerics = check
    results = make_results([base, drained])
    results.save(tmp_path / "results.json")
    loaded = Results.load(tmp_path / "results.json")
    assert loaded.trial("dataloader_workers").numerics == check
    assert loaded.trial("dataloader_workers").metrics.losses_before_window == SERIES[:7]


def test_another_micro_batch_is_compared_on_the_mean_loss_over_the_same_global_steps():
    base = _trial(BASELINE, _metrics(SERIES[2:8], SERIES[:2]))
    larger = _metrics([v * 0.99 for v in SERIES[2:12]], SERIES[:2])
    larger.micro_batch_size = larger.samples_per_step = 32
    check = compare_numerics(base, _trial("micro_batch", larger)).check
    assert check is not None and check.ok and check.method == "loss level" and (check.first_step, check.last_step) == (2, 7)
    said = check.message
    assert said.code == "numerics_within" and said.params["method"] == "loss level" and said.params["tolerance"] == 0.04
    assert round(said.params["diff"], 3) == 0.01 and said.params["steps"].params["samples_per_step"] is None


def test_runs_recorded_before_global_steps_are_compared_on_their_measured_steps():
    base = _trial(BASELINE, _metrics(SERIES[2:8], None))
    same = _trial("old", _metrics(SERIES[2:8], None))
    check = compare_numerics(base, same).check
    assert check is not None and not check.global_steps and check.message.params["steps"] == msg(
        "numerics_steps", first=0, last=5, global_steps=False, samples_per_step=16)

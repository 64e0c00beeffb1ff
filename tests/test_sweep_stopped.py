"""A sweep that stops early (the user's Ctrl-C or SIGTERM, or its budget) recommends what it decided, naming what
it did not finish: a fake session (no processes) injects the stop at a chosen run, and the decisions come from the
recorded runs, never from wall time."""

from __future__ import annotations

import pytest

from perfscope.ranking import rank_results
from perfscope.report.headline import build_story, recommendation_line
from perfscope.report.markdown import answer_lines
from perfscope.results import Trial
from perfscope.results.messages import msg
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from perfscope.wording import words
from tests.test_sweep import FakeSession, _ctx, _step_time

FACTORS = {"amp_bf16": 1.8, "compile": 1.3, "fused_optimizer": 1.2}


def _stop_at(name: str):
    """A session edit that stops the sweep (as SIGTERM does: KeyboardInterrupt) during the run ``name``."""

    def edit(trial: Trial) -> None:
        if trial.name == name:
            raise KeyboardInterrupt

    return edit


def _stopped_sweep(name: str) -> tuple[Sweeper, FakeSession]:
    session = FakeSession(_step_time(FACTORS), edit=_stop_at(name))
    ctx = _ctx()
    session.measure(BASELINE, ctx.base, [])
    sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(skip=["micro_batch", "grad_accum"], order_seed=0))
    with pytest.raises(KeyboardInterrupt):
        sweeper.run()
    session.results.sweep = sweeper.sweep
    return sweeper, session


def test_a_sweep_stopped_mid_stack_recommends_the_part_of_the_stack_already_measured():
    sweeper, session = _stopped_sweep("stack3-fused_optimizer")
    sweep = sweeper.sweep
    assert sweep.stopped_early == msg("stopped_by_user")
    assert sweep.recommended_trial == "stack2-compile" and sweep.recommended_knobs == ["amp_bf16", "compile"]
    gain = sweep.recommended_gain
    assert gain is not None and gain.faster and gain.ratio == pytest.approx(1.8 * 1.3, rel=0.05)
    assert "not confirmed" in gain.method
    assert any("fused" in u and u.startswith("stacking") for u in sweep.unfinished)  # the join in flight
    assert "its confirmation runs" in sweep.unfinished
    assert not session.results.runs("stack3-fused_optimizer")  # the stopped run is not evidence
    # every knob keeps its verdict, best first, and the story recommends the stack with bf16's caveat and what is left
    assert [o.knob for o in sweep.knobs[:3]] == ["amp_bf16", "compile", "fused_optimizer"]
    story = build_story(session.results, rank_results(session.results))
    assert story is not None and story.recommended is not None
    assert words(msg("numerics", change=msg("bf16_matmuls"))) in story.recommended.caveats
    line = recommendation_line(story)
    assert line.startswith("bf16 autocast (AMP)") and " + torch.compile" in line
    assert "decided before the sweep stopped" in line and "fused" in line and "confirmation runs" in line
    assert rank_results(session.results).fixes[0].recommended
    text = answer_lines(session.results, None)  # the terminal's last lines after `analyze` was stopped
    assert "recommendation: bf16 autocast (AMP)" in text and "decided before the sweep stopped" in text
    bf16 = words(msg("numerics", change=msg("bf16_matmuls")))
    assert f"\n  changes: {bf16}" in text and "accept a change in semantics" not in text


def test_a_sweep_stopped_before_stacking_recommends_its_best_decided_knob_and_names_the_others():
    sweeper, session = _stopped_sweep("gc_freeze-r2")  # refining, after bf16, compile and fused had 3 runs each
    sweep = sweeper.sweep
    assert sweep.recommended_trial == "amp_bf16" and sweep.recommended_knobs == ["amp_bf16"]
    assert sweep.recommended_gain is not None and sweep.recommended_gain.faster
    stacking = next(u for u in sweep.unfinished if u.startswith("stacking"))
    assert "torch.compile" in stacking and "fused" in stacking.lower()
    assert "its confirmation runs" in sweep.unfinished
    assert not session.results.runs("stack2-compile")


def test_a_sweep_stopped_before_anything_was_decided_keeps_the_baseline():
    sweeper, session = _stopped_sweep("compile")  # one run of bf16 alone: no verdict yet (3 runs decide)
    sweep = sweeper.sweep
    assert sweep.recommended_trial == BASELINE and sweep.recommended_gain is None
    assert any(o.knob == "fused_optimizer" and o.status == "skipped" and [m.code for m in o.reason] == ["not_reached"] for o in sweep.knobs)
    assert any(u.startswith("measuring") and "torch.compile" in u for u in sweep.unfinished)  # not reached: named
    assert "stopped_nothing_decided" in {n.code for n in sweep.notes}
    story = build_story(session.results, rank_results(session.results))
    assert story is not None and story.recommended is None
    assert recommendation_line(story).startswith("Keep your configuration")


def test_a_budget_that_ends_during_stacking_recommends_the_decided_stack():
    """The budget ends the sweep at the second stacking join (a simulated clock: 10 s per call)."""
    session = FakeSession(_step_time(FACTORS))
    ctx = _ctx()
    session.measure(BASELINE, ctx.base, [])
    stop = {"at": None}

    def elapsed() -> float:
        # the clock stands still until the first join was measured, then jumps past the budget
        if stop["at"] is None and session.results.runs("stack2-compile"):
            stop["at"] = len(session.results.trials)
        return 0.0 if stop["at"] is None else 1e6

    sweeper = Sweeper(session=session, ctx=ctx, elapsed=elapsed,
                      options=SweepOptions(skip=["micro_batch", "grad_accum"], order_seed=0, budget_s=1000))
    sweep = sweeper.run()
    assert sweep.stopped_early == msg("budget_of_exhausted", budget_s=1000)
    assert sweep.recommended_trial == "stack2-compile" and sweep.recommended_knobs == ["amp_bf16", "compile"]
    assert any("fused" in u.lower() and u.startswith("stacking") for u in sweep.unfinished)
    assert any("confirmation" in u for u in sweep.unfinished)


@pytest.mark.parametrize("budget", [30, 45, 60])
def test_a_budget_keeps_its_time_for_the_stack_and_its_confirmation(budget):
    """A simulated clock, one second a run: the sweep never runs past its budget, and the repetition of undecided
    knobs stops short of the runs the stacking and the confirmation need, so the recommendation is decided within
    it — and whatever the budget left undone is named."""
    session = FakeSession(_step_time(FACTORS), noise=0.03)
    ctx = _ctx(device="cpu")
    session.measure(BASELINE, ctx.base, [])
    sweeper = Sweeper(session=session, ctx=ctx, elapsed=lambda: float(len(session.results.trials)), start=0.0,
                      options=SweepOptions(order_seed=0, budget_s=budget))
    sweep = sweeper.run()
    assert len(session.results.trials) <= budget
    assert sweep.recommended_knobs[:1] == ["amp_bf16"] and sweep.recommended_gain is not None and sweep.recommended_gain.faster
    assert "gain_from_confirmation" in {n.code for n in sweep.notes}  # confirmed, not a leftover
    compile_ = next(o for o in sweep.knobs if o.knob == "compile")
    if "compile" not in sweep.recommended_knobs and compile_.gain is not None and compile_.gain.faster:
        assert any("torch.compile" in u for u in sweep.unfinished)  # a winner the budget kept out is named

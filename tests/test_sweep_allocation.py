"""Where a budget's runs go (perfscope.search.allocation): to the candidates that can change the recommendation, at
their own cost, with runs held back only for a winner. Simulated clocks and a fake session: nothing here depends on
the machine's load."""

from __future__ import annotations

import math
import random

import pytest

from perfscope.report.markdown import answer_lines
from perfscope.results import Trial
from perfscope.search.candidate import DEFAULT_BUDGET_S
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from tests.test_sweep import FakeSession, _ctx, _step_time

# The Hugging Face GPT-2 sweep of issue 39 on the 2-core CPU (benchmarks/results/hf_gpt2_tiny_cpu.txt, 86f92f5): each
# run's wall time by configuration, the baseline's run-to-run σ (5.4 % over 13 runs) and bf16's own spread (its 6 runs'
# log throughput around the baseline's level: σ 0.17, one run at 24.3 samples/s among 32-38: 0.16 beside the
# baseline's 0.054); the gains the issue's filer measured: bf16 1.32×, compile 1.08×, fused AdamW 1.05×; a micro-batch
# of 16 ran at 0.79× the samples/s.
GPT2_GAINS = {"amp_bf16": 1.32, "compile": 1.08, "fused_optimizer": 1.05}
GPT2_SIGMA, GPT2_BF16_SPREAD = 0.054, 0.16


def _gpt2_run_s(trial: Trial) -> float:
    config = trial.config
    if config.compile == "default":
        return 44.0  # every compile run pays its compilation
    if config.micro_batch_size > 8:
        return 15.0 * config.micro_batch_size / 16
    return {"amp_bf16": 6.3, "fused_optimizer": 8.7, "gc_freeze": 7.7, "activation_checkpointing": 9.7,
            "adafactor": 7.9}.get(trial.configuration, 6.3 if config.precision == "bf16" else 7.8)


def gpt2_sweep(seed: int) -> tuple[Sweeper, FakeSession, float]:
    """One replay under the default budget; the clock is the sum of the runs' wall times."""
    rng = random.Random(1000 + seed)

    def bf16_spread(configuration: str, repeat: int, config) -> float:
        return math.exp(rng.gauss(0.0, GPT2_BF16_SPREAD)) if config.precision == "bf16" else 1.0

    session = FakeSession(_step_time(GPT2_GAINS, micro_gain=1 / 0.79), noise=GPT2_SIGMA, seed=seed, luck=bf16_spread)
    ctx = _ctx(device="cpu")
    session.measure(BASELINE, ctx.base, [])

    def clock() -> float:
        return sum(_gpt2_run_s(t) for t in session.results.trials)

    sweeper = Sweeper(session=session, ctx=ctx, elapsed=clock, start=0.0,
                      options=SweepOptions(budget_s=DEFAULT_BUDGET_S, order_seed=seed))
    sweeper.run()
    session.results.sweep = sweeper.sweep
    return sweeper, session, clock()


def test_the_default_budget_decides_bf16_on_the_issues_gpt2_figures():
    """Issue 39's "done when", replayed: within the default 300 s the sweep decides bf16 and recommends it with its
    caveat in most replays — 14 of these 20; 2 with the allocation before perfscope.search.allocation, whose real run
    is benchmarks/results/hf_gpt2_tiny_cpu.txt's miss — and never runs past the budget. The misses: bf16's first run
    landed slow (its spread is 3× the baseline's), and the runs went to a knob that looked better."""
    recommended = []
    for seed in range(20):
        sweeper, session, wall = gpt2_sweep(seed)
        assert wall <= DEFAULT_BUDGET_S
        sweep = sweeper.sweep
        if "amp_bf16" in sweep.recommended_knobs:
            recommended.append(seed)
            bf16 = next(o for o in sweep.knobs if o.knob == "amp_bf16")
            assert bf16.gain is not None and bf16.gain.faster  # decided, family-wise
            assert sweep.recommended_gain is not None and sweep.recommended_gain.faster
            if len(recommended) == 1:
                text = answer_lines(session.results, None)
                assert "recommendation: bf16 autocast (AMP)" in text and "\n  changes: " in text
                assert [m.code for m in bf16.changes_semantics] == ["numerics"]  # its words: test_sweep_stopped
    assert len(recommended) >= 13, recommended


def test_a_knob_that_changes_the_recipe_and_a_global_batch_search_wait_for_the_refinement_under_a_budget():
    """Adafactor (a recipe change) and the CPU micro-batch search (each point changes the global batch) can only be
    reported: under a budget their runs come after the knobs that can join the recommendation were refined; without a
    budget, in the registry's order."""
    def order(budget: float | None) -> list[str]:
        session = FakeSession(_step_time({"amp_bf16": 1.5}), noise=0.02)
        ctx = _ctx(device="cpu")
        session.measure(BASELINE, ctx.base, [])
        Sweeper(session=session, ctx=ctx, options=SweepOptions(order_seed=0, budget_s=budget)).run()
        return [n for n in session.calls if not n.startswith("baseline")]

    bounded = order(1e9)
    decided = bounded.index("amp_bf16-r3")  # bf16's first look that can decide: refined before them
    assert bounded.index("adafactor") > decided and bounded.index("mb16") > decided
    unbounded = order(None)
    assert unbounded.index("adafactor") < unbounded.index("mb16") < unbounded.index("amp_bf16-r2")


def test_no_run_is_held_back_while_nothing_is_a_winner():
    """Runs held back for the stacking and the confirmation only once there is a winner to stack and confirm."""
    session = FakeSession(_step_time({}), noise=0.02)
    ctx = _ctx(device="cpu")
    session.measure(BASELINE, ctx.base, [])
    sweeper = Sweeper(session=session, ctx=ctx, options=SweepOptions(order_seed=0, only=["amp_bf16"], budget_s=1e9))
    sweeper.run()
    assert not sweeper._winners() and sweeper.held_back() == 0


@pytest.mark.parametrize("cost, affordable", [(44.0, False), (20.0, True)])
def test_a_configuration_whose_run_costs_more_than_the_budget_leaves_is_not_started(cost, affordable):
    """The budget's check uses the candidate's own cost (its latest measurement), not the median measurement."""
    session = FakeSession(_step_time({}), noise=0.02)
    ctx = _ctx(device="cpu")
    session.measure(BASELINE, ctx.base, [])
    now = {"t": 0.0}
    sweeper = Sweeper(session=session, ctx=ctx, elapsed=lambda: now["t"], start=0.0,
                      options=SweepOptions(order_seed=0, only=["compile"], budget_s=100))
    sweeper.run()
    cand = next(c for c in sweeper.candidates if c.name == "compile")
    sweeper.pair_s, sweeper.pair_cost = [10.0], {"compile": cost}  # a run 5 s; the compile pair `cost`
    now["t"] = 65.0  # 35 s left; no winner, so nothing held back; one run for the report leaves 30
    assert (sweeper.affordable([cand]) == [cand]) is affordable

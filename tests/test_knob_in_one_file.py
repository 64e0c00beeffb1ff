"""Adding a knob = one file + a registry line + a test row: a knob defined here, through the public registry
alone (no edit of the config, the loop, the sweep, the rules or the report), runs in real CPU trials, is
measured by the sweep, explained by the rules and rendered in the report.

The trials run in this process (`run_trial`, as the trial child runs them), so the knob registered here is
the one the loop sees; a real analysis forks its trials from a process that imported the registry.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from perfscope.knobs import Knob, KnobContext, Observed, active_knobs, registered
from perfscope.pipeline import finish
from perfscope.results import Finding, ModelFacts
from perfscope.results.config import TrialConfig
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from perfscope.trial.applied import not_applied
from perfscope.workload import load_workload
from tests.in_process import InProcessSession

WORKLOAD = Path(__file__).parent / "workloads" / "mlp.py"
PAUSE_S = 0.02
"""The knob's cost per micro-batch: many times the tiny MLP's step (even on a loaded machine), so two runs see it."""


class HostPause(Knob):
    """A throwaway knob with no TrialConfig field of its own: its setting lives in ``knob_settings``."""

    id = "host_pause"
    title = "a pause on the host before each micro-batch"
    reference = "https://example.invalid/host-pause"
    addresses = ("host",)

    def __init__(self) -> None:
        self.entered = 0
        """Micro-batches the trial ran under this knob's context: proof the loop applied it."""

    def code_change(self, ctx: KnobContext) -> str | None:
        return " for batch in loader:\n+    time.sleep(PAUSE)"

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"knob_settings": {self.id: PAUSE_S}}]

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[str]:
        return []

    def step_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        @contextmanager
        def pause() -> Any:
            self.entered += 1
            time.sleep(float(config.knob_settings[self.id]))
            yield

        return pause()


def test_a_knob_defined_in_one_place_is_applied_measured_explained_and_reported(tmp_path):
    workload = load_workload(WORKLOAD)
    base = TrialConfig(device="cpu", micro_batch_size=8, steps=8, warmup_steps=1, count_flops=False,
                       sample_utilization=False)
    session = InProcessSession(workload)
    ctx = KnobContext(workload=workload, base=base, environment=session.results.environment,
                      model=ModelFacts(parameter_count=2762, has_conv2d=False, repeated_blocks=0, optimizer_class="AdamW"))
    knob = HostPause()
    with registered(knob):
        config = knob.apply(base, knob.variants(ctx)[0])
        assert [k.id for k in active_knobs(config)] == ["host_pause"] and not active_knobs(base)
        session.measure(BASELINE, base)
        sweep = Sweeper(session=session, ctx=ctx, options=SweepOptions(only=["host_pause"], max_runs=2, order_seed=0,
                                                                       trace_recommended=False)).run()
        session.results.sweep = sweep
        finish(session.results, tmp_path)

    assert knob.entered >= 2 * 8, "the loop ran the knob's context around its micro-batches"
    outcome = next(o for o in sweep.knobs if o.knob == "host_pause")
    assert outcome.status == "measured", outcome
    assert outcome.gain is not None and outcome.gain.ratio < 0.9  # 20 ms more per step of a few ms: slower
    assert outcome.setting == f"host_pause={PAUSE_S}" and "time.sleep(PAUSE)" in (outcome.code_change or "")
    assert sweep.recommended_trial == BASELINE  # a slowdown is never recommended

    finding: Finding = next(f for f in session.results.findings if f.trial == outcome.trial)
    assert finding.addresses == ["host"]  # the rules read the slice the knob declared
    assert finding.title.startswith(knob.title) and finding.fix == outcome.code_change
    for report in ("report.md", "report.html"):
        text = (tmp_path / report).read_text()
        assert knob.title in text, report
    saved = (tmp_path / "results.json").read_text()
    assert '"host_pause"' in saved and '"knob_settings"' in saved


def test_a_knob_the_trial_process_does_not_know_is_not_applied_never_measured():
    """`register` reaches trials run in its own process (or forked from it); a trial process started afresh only
    knows the registry's built-in knobs, and its run must not pass for a measurement of the knob."""
    config = TrialConfig(micro_batch_size=8, knob_settings={"host_pause": PAUSE_S})
    assert "no knob host_pause is registered" in not_applied(config, Observed())["knob_settings"]
    with registered(HostPause()):
        assert not_applied(config, Observed()) == {}

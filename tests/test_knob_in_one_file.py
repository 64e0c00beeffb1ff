"""Adding a knob = one file + a registry line + a test row: a knob defined here, through the public registry
alone (no edit of the config, the loop, the sweep, the rules, the hooks, the waterfall or the report), runs in
real CPU trials, is measured by the sweep, explained by the rules, linked to the MFU gap's parts and rendered in
the report; a Profiler in the user's own loop observes it (`Knob.observe`), and a trial whose workload switched it
back names it not applied (`Knob.record` + `Knob.not_applied`).

The trials run in this process (`run_trial`, as the trial child runs them), so the knob registered here is
the one the loop sees; a real analysis forks its trials from a process that imported the registry.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perfscope.hooks.profiler import Profiler
from perfscope.knobs import Knob, KnobContext, Loop, Observed, active_knobs, observe_loop, registered
from perfscope.knobs.base import set_back
from perfscope.pipeline import finish
from perfscope.report.waterfall_chart import part_fixes
from perfscope.results import Finding, ModelFacts
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.search.candidate import Candidate
from perfscope.search.sweep import BASELINE, Sweeper, SweepOptions
from perfscope.trial.loop import not_applied, record, run_trial
from perfscope.workload import load_workload
from tests.factories import make_trial
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

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return []

    def step_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        @contextmanager
        def pause() -> Any:
            self.entered += 1
            time.sleep(float(config.knob_settings[self.id]))
            yield

        return pause()

    def record(self, config: TrialConfig) -> Any:
        return self.entered  # at the end of the timed window

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        return set_back("no micro-batch paused") if seen.recorded.get(self.id) == 0 else None


class CudnnBenchmark(Knob):
    """A throwaway knob whose setting is process-wide state a user's loop sets itself (readable on a CPU)."""

    id = "cudnn_benchmark"
    title = "cuDNN autotuning"
    reference = "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark"
    addresses = ("conv",)

    def code_change(self, ctx: KnobContext) -> str | None:
        return "+torch.backends.cudnn.benchmark = True\n model = MyNet()"

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"knob_settings": {self.id: True}}]

    def before_steps(self, config: TrialConfig) -> None:
        torch.backends.cudnn.benchmark = True

    def record(self, config: TrialConfig) -> Any:
        return torch.backends.cudnn.benchmark

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        if seen.recorded.get(self.id, True):
            return None
        return set_back("cudnn.benchmark was off at the end of the timed steps")

    def observe(self, loop: Loop) -> dict[str, Any] | None:
        return {"knob_settings": {self.id: True}} if torch.backends.cudnn.benchmark else {}


@pytest.fixture
def cudnn_benchmark_restored() -> Iterator[None]:
    before = torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.benchmark = before


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
        assert "host_pause" in part_fixes("launch")  # the MFU waterfall links it from its `addresses` (host → launch)

    assert knob.entered >= 2 * 8, "the loop ran the knob's context around its micro-batches"
    outcome = next(o for o in sweep.knobs if o.knob == "host_pause")
    assert outcome.status == "measured", outcome
    assert outcome.gain is not None and outcome.gain.ratio < 0.9  # 20 ms more per step of a few ms: slower
    assert outcome.setting == f"host_pause={PAUSE_S}" and "time.sleep(PAUSE)" in (outcome.code_change or "")
    assert sweep.recommended_trial == BASELINE  # a slowdown is never recommended

    finding: Finding = next(f for f in session.results.findings if f.trial == outcome.trial)
    assert finding.addresses == ["host"]  # the rules read the slice the knob declared
    assert outcome.trial and not next(t for t in session.results.trials if t.name == outcome.trial).metrics.not_applied
    assert finding.title.startswith(knob.title) and finding.fix == outcome.code_change
    for report in ("report.md", "report.html"):
        text = (tmp_path / report).read_text()
        assert knob.title in text, report
    gap_row = next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| launch & host"))
    assert "host_pause" in gap_row  # the waterfall's "Acts on it" column, rendered
    saved = (tmp_path / "results.json").read_text()
    assert '"host_pause"' in saved and '"knob_settings"' in saved


def test_a_knob_the_trial_process_does_not_know_is_not_applied_never_measured():
    """`register` reaches trials run in its own process (or forked from it); a trial process started afresh only
    knows the registry's built-in knobs, and its run must not pass for a measurement of the knob."""
    config = TrialConfig(micro_batch_size=8, knob_settings={"host_pause": PAUSE_S})
    assert not_applied(config, Observed())["knob_settings"] == msg("knob_unregistered", knobs=["host_pause"])
    with registered(HostPause()):
        assert not_applied(config, Observed()) == {}


def _profiled_loop(*, user_sets_benchmark: bool) -> TrialConfig:
    """A user's own loop under a Profiler; returns the observed config (and its unknown settings via the trial)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.backends.cudnn.benchmark = user_sets_benchmark  # the user's code, not perfscope, sets it
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, measure_ceiling=False,
                    sample_utilization=False, peak_tflops=1.0)
    for _ in range(4):
        F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    return prof.results().trials[0]


def test_a_profiler_observes_a_knob_through_its_own_observe_and_leaves_the_rest_unknown(cudnn_benchmark_restored):
    with registered(CudnnBenchmark()), registered(HostPause()):
        on = _profiled_loop(user_sets_benchmark=True)
        off = _profiled_loop(user_sets_benchmark=False)
    assert on.config.knob_settings == {"cudnn_benchmark": True} and "knob_settings.cudnn_benchmark" not in on.unknown_settings
    assert off.config.knob_settings == {} and "knob_settings.cudnn_benchmark" not in off.unknown_settings  # observed off
    assert "knob_settings.host_pause" in on.unknown_settings  # the default `observe`: not observed, never assumed off
    assert "cudnn_benchmark" not in [k.id for k in active_knobs(on.config)]  # the registry is left as it was
    with registered(CudnnBenchmark()):
        assert "cudnn_benchmark" in [k.id for k in active_knobs(on.config)]  # the observed loop runs the knob


SWITCHES_BACK = """
import torch
import perfscope
from tests.workloads import mlp

def loss(model, batch):
    torch.backends.cudnn.benchmark = False  # the user's loss undoes what the trial set before the steps
    return mlp.loss(model, batch)

def workload():
    return perfscope.Workload(model=mlp.make_model, batches=mlp.batches, loss=loss, batch_size=8)
"""


class BrokenObserve(HostPause):
    id = "broken_observe"

    def observe(self, loop: Loop) -> dict[str, Any] | None:
        raise RuntimeError("a plugin's bug")


def test_a_knob_whose_observe_raises_leaves_its_setting_unknown_never_the_run():
    with registered(BrokenObserve()), registered(CudnnBenchmark()):
        known, unknown = observe_loop(Loop(device="cpu"))
    assert "knob_settings.broken_observe" in unknown and "knob_settings.cudnn_benchmark" not in unknown
    assert "broken_observe" not in known.get("knob_settings", {})


def test_a_trial_records_what_the_knob_needs_and_names_its_setting_not_applied(tmp_path, cudnn_benchmark_restored):
    (tmp_path / "switches_back.py").write_text(SWITCHES_BACK)
    workload = load_workload(tmp_path / "switches_back.py")
    config = TrialConfig(device="cpu", micro_batch_size=8, steps=3, warmup_steps=1, count_flops=False,
                         sample_utilization=False, knob_settings={"cudnn_benchmark": True})
    with registered(CudnnBenchmark()):
        found = run_trial(workload, config).metrics.not_applied
        assert run_trial(load_workload(WORKLOAD), config).metrics.not_applied == {}  # kept on: applied
    assert list(found) == ["knob_settings.cudnn_benchmark"] and found["knob_settings.cudnn_benchmark"].code == "knob_set_back"


def test_a_setting_the_workload_switched_back_is_not_applied_and_its_run_not_a_measurement(cudnn_benchmark_restored):
    knob = CudnnBenchmark()
    config = TrialConfig(micro_batch_size=8, knob_settings={"cudnn_benchmark": True})
    with registered(knob):
        knob.before_steps(config)
        assert not_applied(config, Observed(recorded=record(active_knobs(config), config))) == {}
        torch.backends.cudnn.benchmark = False  # the workload's loss, say, switched it back during the steps
        found = not_applied(config, Observed(recorded=record(active_knobs(config), config)))
        assert list(found) == ["knob_settings.cudnn_benchmark"] and found["knob_settings.cudnn_benchmark"].code == "knob_set_back"
        trial = make_trial("cudnn_benchmark-1")
        trial.metrics.not_applied = found
        cand = Candidate(knob=knob, changes=knob.variants(None)[0], name="cudnn_benchmark", config=config,  # type: ignore[arg-type]
                         knobs=["cudnn_benchmark"], first=trial)
        assert cand.not_applied and not cand.usable  # the sweep reports it failed, never measured
        assert "cudnn_benchmark" in part_fixes("gemm")  # conv is matmul-class: the GEMM-efficiency part
    assert "cudnn_benchmark" not in part_fixes("gemm")  # gone with the knob

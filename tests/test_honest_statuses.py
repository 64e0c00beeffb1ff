"""Honest statuses: a knob whose trial did not do what it says is never reported as measured.

The trial records what it actually ran with at the end of its timed steps (perfscope.trial.loop.not_applied); the sweep
reports a knob whose own setting the run did not apply as failed, with the reason."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from perfscope.results.config import TrialConfig
from perfscope.results.messages import msg
from perfscope.tf32_api import restore_matmul_tf32, snapshot_matmul_tf32
from perfscope.trial.loop import Observed, compile_not_applied, not_applied

WORKLOADS = Path(__file__).parent / "workloads"


def _config(**changes) -> TrialConfig:
    return TrialConfig(device="cpu", micro_batch_size=8, **changes)


def test_a_config_the_run_followed_has_nothing_not_applied():
    seen = Observed(compiled_graphs=3, recorded={"tf32": True, "gc_freeze": {"enabled": True, "frozen_objects": 1200}},
                    env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, matmul_flops_by_dtype={"bf16": 1e9, "fp32": 1e6})
    config = _config(compile="default", tf32=True, gc_mode="freeze", precision="bf16",
                     env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert not_applied(config, seen) == {}
    assert not_applied(_config(), Observed()) == {}  # the baseline asks for nothing to check


@pytest.mark.parametrize(("config", "seen", "key", "why"), [
    (_config(compile="default"), Observed(compiled_graphs=0), "compile", msg("compile_no_graph")),
    (_config(compile="default"), Observed(compiled_graphs=None), "compile", msg("compile_no_dynamo")),
    (_config(tf32=True), Observed(recorded={"tf32": False}), "tf32", msg("tf32_set_back", trial=True, ran=False)),
    (_config(gc_mode="freeze"), Observed(recorded={"gc_freeze": {"enabled": True, "frozen_objects": 0}}), "gc_mode",
     msg("gc_freeze_undone")),
    (_config(gc_mode="disable"), Observed(recorded={"gc_freeze": {"enabled": True, "frozen_objects": 0}}), "gc_mode",
     msg("gc_enabled_again")),
    (_config(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}), Observed(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}),
     "env", msg("env_set_back", changed={"PYTORCH_CUDA_ALLOC_CONF": ["max_split_size_mb:128", "expandable_segments:True"]})),
    (_config(precision="bf16"), Observed(matmul_flops_by_dtype={"fp32": 1e9}), "precision",
     msg("autocast_no_matmul", dtype="bf16", ran=["fp32"])),
])
def test_what_the_run_did_not_apply_is_named(config, seen, key, why):
    assert not_applied(config, seen) == {key: why}


def test_unknown_state_is_not_a_violation():
    # torch cannot tell the TF32 state; the fingerprint counted no matmul: nothing to contradict the config.
    assert not_applied(_config(tf32=True, precision="bf16"), Observed(recorded={"tf32": None}, matmul_flops_by_dtype={})) == {}


def test_compile_that_entered_frames_but_compiled_no_graph_is_not_applied():
    # A backend error under torch._dynamo.config.suppress_errors: frames counted, no graph (the old check passed it).
    assert compile_not_applied(0) is not None and compile_not_applied(2) is None


def test_a_trial_records_the_settings_the_workloads_code_set_back(monkeypatch):
    """A real (in-process) trial of a loop that undoes TF32, gc.freeze(), an env var and autocast."""
    from perfscope.trial.loop import run_trial
    from perfscope.workload import load_workload

    monkeypatch.setenv("PERFSCOPE_TEST_KNOB", "asked-by-the-trial")
    snapshot = snapshot_matmul_tf32()
    try:
        workload = load_workload(WORKLOADS / "overrides_settings.py")  # rewrites PERFSCOPE_TEST_KNOB at import
        config = _config(steps=3, warmup_steps=1, tf32=True, gc_mode="freeze", precision="bf16",
                         env={"PERFSCOPE_TEST_KNOB": "asked-by-the-trial"}, sample_utilization=False, count_flops=False)
        found = run_trial(workload, config).metrics.not_applied
    finally:
        restore_matmul_tf32(snapshot)
        gc.unfreeze()
    assert set(found) == {"tf32", "gc_mode", "env", "precision"}, found
    assert found["env"].code == "env_set_back" and found["env"].params["changed"]["PERFSCOPE_TEST_KNOB"][0] == "set-by-the-workload"
    assert found["precision"] == msg("autocast_no_matmul", dtype="bf16", ran=["fp32"])


def test_a_trial_that_applied_everything_records_nothing():
    from perfscope.trial.loop import run_trial
    from perfscope.workload import load_workload

    snapshot = snapshot_matmul_tf32()
    try:
        config = _config(steps=3, warmup_steps=1, tf32=True, gc_mode="freeze", precision="bf16", sample_utilization=False, count_flops=False)
        metrics = run_trial(load_workload(WORKLOADS / "mlp.py"), config).metrics
    finally:
        restore_matmul_tf32(snapshot)
        gc.unfreeze()
    assert metrics.not_applied == {}


def test_a_knob_whose_run_did_not_apply_it_is_failed_not_measured():
    """The sweep: compile looks 1.5× faster but its run fell back to eager (say, the trial mislabelled), and
    gc.freeze() was undone by the user's code: neither is measured, neither is stacked or recommended."""
    from perfscope.search.sweep import BASELINE
    from tests.test_sweep import FakeSession, _ctx, _outcome, _run, _step_time

    def fell_back(trial) -> None:
        if trial.ok and trial.config.compile is not None:
            trial.metrics.not_applied = {"compile": msg("compile_no_graph")}
        if trial.ok and trial.config.gc_mode == "freeze":
            trial.metrics.not_applied = {"gc_mode": msg("gc_freeze_undone")}

    session = FakeSession(_step_time({"compile": 1.5, "fused_optimizer": 1.3}), edit=fell_back)
    sweeper = _run(_ctx(), session, only=["compile", "gc_freeze", "fused_optimizer"])
    compile_, gc_ = _outcome(sweeper, "compile"), _outcome(sweeper, "gc_freeze")
    assert compile_.status == "failed" and compile_.gain is None
    assert compile_.reason == [msg("knob_not_applied", why=[msg("compile_no_graph")])]
    assert gc_.status == "failed" and gc_.reason == [msg("knob_not_applied", why=[msg("gc_freeze_undone")])]
    assert _outcome(sweeper, "fused_optimizer").status == "measured"
    assert "compile" not in sweeper.sweep.recommended_knobs and sweeper.sweep.recommended_knobs == ["fused_optimizer"]
    assert len(session.results.runs("compile")) == 1  # an unusable candidate gets no more runs
    assert session.results.runs(BASELINE)
    # The rules see no measurement of compile: no finding carries its (mislabelled) gain.
    from perfscope.rules import run_rules

    session.results.sweep = sweeper.sweep
    assert all(f.trial != "compile" for f in run_rules(session.results))

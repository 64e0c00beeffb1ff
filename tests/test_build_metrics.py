"""One measurement core: a RunObservation in, TrialMetrics out (perfscope.measure.build), for trials and hooks alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfscope.measure.build import (
    CPU_PEAK_IS_RSS,
    MEMORY_PEAK_TOLERANCE,
    attach_trace,
    build_trial_metrics,
)
from perfscope.measure.flops import FLOP_CONVENTION
from perfscope.measure.observation import FirstStep, FlopCount, MemoryPeaks, RunObservation, Unavailable
from perfscope.measure.window import StepRecord
from perfscope.results import MemoryBreakdown, Window
from perfscope.results.fingerprint import Fingerprint
from perfscope.results.messages import msg

OWNERS = MemoryBreakdown(parameters=100, gradients=100, optimizer_state=200, activations_and_temporaries=None)


def observation(**changes: object) -> RunObservation:
    """Four timed steps of 8 samples in 2 s, on CUDA, everything observed."""
    records = [StepRecord(index=i, time_s=t, data_wait_s=0.1, host_data_wait_s=0.1, samples=8, micro_steps=1)
               for i, t in enumerate([0.4, 0.4, 0.4, 0.8])]
    base = RunObservation(
        device_type="cuda", windows=[Window(steps=4, samples=32, wall_s=2.0, data_wait_s=0.4, host_data_wait_s=0.4)],
        records=records, micro_batch_size=8, grad_accum_steps=1, warmup_steps=3, tokens_per_sample=16,
        memory=MemoryPeaks(device_type="cuda", allocated=1000, reserved=1500, capacity=8000, host_rss=50),
        owners=OWNERS, flops=FlopCount(model=1e9, hardware=1.5e9, notes=[msg("flops_fake_tensors", micro=8)]),
        fingerprint=Fingerprint(method="test"), first_step=FirstStep(seconds=1.5, compiled=True),
        losses=[2.0, 1.9, 1.8, 1.7], optimizer="torch.optim.sgd.SGD", calibration="4 steps as asked",
        recompiles_in_window=0, matmul_tf32=True,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_rates_are_work_over_wall_and_every_observed_figure_lands() -> None:
    m = build_trial_metrics(observation())
    assert m.samples_per_s == pytest.approx(16.0) and m.tokens_per_s == pytest.approx(256.0)
    assert m.data_wait_share == pytest.approx(0.2) and m.steps == 4 and m.samples_per_step == 8
    assert m.typical_step is not None and m.typical_step.median == pytest.approx(0.4)  # a description, not the rate
    assert (m.peak_memory_bytes, m.peak_reserved_bytes, m.device_memory_capacity_bytes) == (1000, 1500, 8000)
    assert m.memory_breakdown == dataclasses.replace(OWNERS, activations_and_temporaries=600)  # the peak's rest
    assert (m.flops_per_step, m.hardware_flops_per_step, m.flop_convention) == (1e9, 1.5e9, FLOP_CONVENTION)
    assert m.first_step_s == 1.5 and m.compile_time_s == pytest.approx(1.0)  # 1.5 s - the mean step's 0.5 s
    assert m.losses == [2.0, 1.9, 1.8, 1.7] and m.matmul_tf32 is True and m.recompiles_in_window == 0
    assert m.fingerprint is not None and m.fingerprint.memory is not None
    assert m.fingerprint.memory.tolerance == MEMORY_PEAK_TOLERANCE and m.fingerprint.memory.bytes == 1000
    assert m.fingerprint.memory.source == "torch.cuda.max_memory_allocated over the timed window"
    assert m.unavailable == {} and m.flags == []


def test_what_was_not_observed_is_unavailable_with_its_reason() -> None:
    m = build_trial_metrics(observation(
        device_type="cpu", memory=MemoryPeaks(device_type="cpu", host_rss=4096),
        owners=Unavailable(msg("hooks_owners_need_optimizer")), flops=Unavailable(msg("flops_disabled")),
        fingerprint=Unavailable(msg("structure_failed", error="boom")),
        first_step=Unavailable(msg("hooks_first_step_needs_wrap")), losses=Unavailable(msg("hooks_losses_not_read")),
        matmul_tf32=Unavailable(msg("tf32_state_unknown", why="unknown API")),
        window_syncs=Unavailable(msg("window_syncs_on_cpu")), data_wait=Unavailable(msg("hooks_data_wait_needs_wrap")),
    ))
    assert m.peak_memory_bytes == 4096 and m.unavailable["peak_memory_bytes"] == CPU_PEAK_IS_RSS
    assert m.peak_reserved_bytes is None and m.unavailable["peak_reserved_bytes"].code == "cpu_no_reserved"
    assert m.unavailable["memory_breakdown"].code == "hooks_owners_need_optimizer" and m.memory_breakdown is None
    assert m.unavailable["flops_per_step"].code == "flops_disabled" and m.flops_per_step is None
    assert m.unavailable["fingerprint"] == msg("structure_failed", error="boom") and m.fingerprint is None
    assert m.unavailable["first_step_s"].code == "hooks_first_step_needs_wrap" and m.compile_time_s is None
    assert m.unavailable["losses"].code == "hooks_losses_not_read" and m.losses == []
    assert m.unavailable["matmul_tf32"].params == {"why": "unknown API"} and m.matmul_tf32 is None
    assert m.unavailable["data_wait_share"].code == "hooks_data_wait_needs_wrap"


def test_on_cpu_the_breakdown_has_no_rest_and_the_fingerprint_no_memory() -> None:
    m = build_trial_metrics(observation(device_type="cpu", memory=MemoryPeaks(device_type="cpu", host_rss=1),
                                        window_syncs=Unavailable(msg("window_syncs_on_cpu"))))
    assert m.memory_breakdown == OWNERS  # parameters, gradients, state counted; no allocator peak to split
    assert "memory_breakdown.activations_and_temporaries" in m.unavailable
    assert m.fingerprint is not None and m.fingerprint.memory is None
    assert set(m.fingerprint.unavailable) == {"memory", "kernel_launches", "window_syncs"}


def test_unknown_samples_and_recompiles_are_said() -> None:
    m = build_trial_metrics(observation(windows=[Window(steps=4, samples=None, wall_s=2.0)], recompiles_in_window=2))
    assert m.samples_per_s is None and m.unavailable["samples_per_s"].code == "samples_per_step_unknown"
    assert m.recompiles_in_window == 2 and m.flags == [msg("recompiled_in_window", times=2)]


def test_a_trace_that_cannot_be_analysed_costs_its_facts_only(tmp_path: Path) -> None:
    m = build_trial_metrics(observation())
    bad = tmp_path / "rank0.json.gz"
    bad.write_bytes(b"not a trace")
    attach_trace(m, bad, device_type="cuda", steps=None)
    assert m.trace_path == str(bad) and m.trace_facts is None
    assert m.unavailable["trace_facts"].code == "trace_analysis_failed"


def test_trials_and_hooks_build_the_same_metrics_from_the_same_observation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial loop and the Profiler both hand their observation to build_trial_metrics: capture what each handed
    over on the same workload, and each observation, built again, gives exactly the metrics that run reported."""
    from perfscope.hooks import Profiler
    from perfscope.hooks import results as hook_results
    from perfscope.measure import build
    from perfscope.results.config import TrialConfig
    from perfscope.trial import loop

    seen: list[tuple[RunObservation, object]] = []
    real = build.build_trial_metrics

    def spy(obs: RunObservation):  # type: ignore[no-untyped-def]
        copy = dataclasses.replace(obs, fingerprint=dataclasses.replace(obs.fingerprint)
                                   if isinstance(obs.fingerprint, Fingerprint) else obs.fingerprint)
        metrics = real(obs)
        seen.append((copy, metrics))
        return metrics

    monkeypatch.setattr(loop, "build_trial_metrics", spy)
    monkeypatch.setattr(build, "build_trial_metrics", spy)
    monkeypatch.setattr(hook_results, "build_trial_metrics", spy)
    from tests.test_hooks import make_loader, make_model, train_step

    model, opt = make_model()
    prof = Profiler(model, opt, device="cpu", warmup_steps=1, measure_ceiling=False, sample_utilization=False,
                    peak_tflops=1.0)
    for batch in prof.wrap(make_loader()):
        train_step(model, opt, batch)
        prof.step()
    hooked = prof.results()
    assert hooked is not None
    workload = Path(__file__).parent / "workloads" / "mlp.py"
    from perfscope.workload import load_workload

    run = loop.run_trial(load_workload(workload), TrialConfig(micro_batch_size=8, steps=3, warmup_steps=1, device="cpu",
                                                              sample_utilization=False))
    (hooks_obs, hooks_built), (trial_obs, trial_built) = seen
    assert hooks_built is hooked.trials[0].metrics and trial_built is run.metrics
    for obs, reported in ((hooks_obs, hooked.trials[0].metrics), (trial_obs, run.metrics)):
        again = real(obs)
        for field in ("samples_per_s", "steps", "wall_s", "flops_per_step", "peak_memory_bytes", "memory_breakdown"):
            assert getattr(again, field) == getattr(reported, field), field
    # The same words for the same missing figure, whoever observed it (CPU: no allocator peak).
    for key in ("peak_memory_bytes", "peak_reserved_bytes", "memory_breakdown.activations_and_temporaries"):
        assert hooked.trials[0].metrics.unavailable[key] == run.metrics.unavailable[key]
    assert hooked.trials[0].metrics.fingerprint.unavailable["memory"] == run.metrics.fingerprint.unavailable["memory"]

"""The baseline's step split into slices a finding points at (perfscope.results.breakdown), and the trace facts
it reads: on a CPU the Dataset's ops (inside the data spans) are the data wait, not the step's compute."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from perfscope.results import GpuTimeline, IdleBreakdown
from perfscope.results.breakdown import addressed, step_breakdown
from perfscope.trace.capture import TraceCapture
from perfscope.trace.facts import trace_facts
from tests.factories import make_trace_facts, make_trial


def _metrics(wait: float = 0.0, facts=None):
    trial = make_trial(median_s=0.1, noise=0.0)
    m = trial.metrics
    m.data_wait_share = wait
    m.trace_facts = facts
    return m


def test_without_a_trace_the_step_is_data_wait_and_the_rest():
    slices = step_breakdown(_metrics(wait=0.7))
    assert [s.key for s in slices] == ["data_wait", "compute"]
    assert sum(s.seconds for s in slices) == pytest.approx(_metrics().mean_step_time_s)
    assert slices[0].share == pytest.approx(0.7)
    # A compute fix points at "compute & other" when no trace split it; a memory fix at nothing.
    assert [s.key for s in addressed(slices, ["gemm"])] == ["compute"]
    assert addressed(slices, []) == [] and len(addressed(slices, ["step"])) == 2


def test_a_cpu_trace_splits_the_compute_by_op_category_and_host_overhead():
    facts = make_trace_facts()
    facts.gpu, facts.kernels.source, facts.step_time_s, facts.data_wait_fraction = None, "cpu ops", 0.1, 0.5
    facts.kernels.time_by_category = {"gemm": 0.03, "elementwise": 0.01}  # 40 ms of ops in 50 ms of compute
    slices = {s.key: s for s in step_breakdown(_metrics(wait=0.5, facts=facts))}
    step = sum(s.seconds for s in slices.values())
    assert slices["data_wait"].share == pytest.approx(0.5)
    assert slices["gemm"].share == pytest.approx(0.3, rel=1e-6) and slices["elementwise"].share == pytest.approx(0.1, rel=1e-6)
    assert slices["host"].share == pytest.approx(0.1, rel=1e-6)  # the 10 ms no op accounts for
    assert step == pytest.approx(_metrics().mean_step_time_s)


def test_a_gpu_trace_splits_idle_by_what_it_waited_for_and_busy_by_kernel_category():
    facts = make_trace_facts()
    facts.step_time_s = 0.1
    facts.gpu = GpuTimeline(busy_fraction=0.6, idle_fraction=0.4, busy_s=0.06,
                            idle=IdleBreakdown(data_wait_s=0.0, sync_s=0.01, host_s=0.03, other_s=0.0))
    facts.kernels = dataclasses.replace(facts.kernels, time_by_category={"gemm": 0.045, "elementwise": 0.015})
    slices = {s.key: s for s in step_breakdown(_metrics(facts=facts))}
    assert slices["launch"].share == pytest.approx(0.3, rel=1e-6) and slices["sync"].share == pytest.approx(0.1, rel=1e-6)
    assert slices["gemm"].share == pytest.approx(0.45, rel=1e-6) and slices["elementwise"].share == pytest.approx(0.15, rel=1e-6)
    assert [s.key for s in addressed(list(slices.values()), ["launch"])] == ["launch"]


def test_slivers_fold_into_other_ops():
    facts = make_trace_facts()
    facts.gpu, facts.kernels.source, facts.step_time_s, facts.data_wait_fraction = None, "cpu ops", 0.1, 0.0
    facts.kernels.time_by_category = {"gemm": 0.09, "memset": 0.0001}
    keys = [s.key for s in step_breakdown(_metrics(facts=facts))]
    assert "memset" not in keys and "gemm" in keys


def test_cpu_trace_facts_leave_the_datasets_ops_to_the_data_wait(tmp_path):
    """The Dataset runs FFTs inside next() (no workers); the step itself has none: its op time must not show them."""
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    with TraceCapture(tmp_path / "trace.json.gz", device="cpu") as cap:
        for _ in range(cap.total_steps):
            with torch.profiler.record_function("perfscope::data"):
                for _ in range(20):
                    torch.fft.irfft2(torch.fft.rfft2(torch.rand(3, 64, 64)))
                x = torch.randn(32, 64)
            model(x).sum().backward()
            cap.step()
    facts = trace_facts(cap.path, device_type="cpu", steps=cap.active)
    assert facts.data_wait_fraction > 0.2
    assert not any("fft" in k.name for k in facts.kernels.top), [k.name for k in facts.kernels.top]
    assert facts.kernels.time_by_category.get("gemm", 0) > 0

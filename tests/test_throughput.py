"""Throughput is work over wall time, in analyze and in the hooks alike — never the batch over a median step.

The workload's step times are bimodal (three fast steps, then one that waits 120 ms for data): the median
step is a fast one, so batch / median would overstate the throughput several times.

The bimodal tests run on a simulated host clock: the Dataset's stall and each step's compute advance it, and
the window reads it (through perfscope.measure.clock), so every step time is known exactly. With real sleeps
a loaded machine stretched the fast steps until the fixture was no longer bimodal enough to decide anything. The
hooks' case drives the Profiler's injected clock instead (``Profiler(clock=...)``), with its own stalling loader.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from perfscope.hooks import Profiler
from perfscope.results.config import TrialConfig
from perfscope.trial.loop import run_trial
from perfscope.workload import load_workload
from tests.integrations.workloads import SIMULATED_COMPUTE_S, SIMULATED_STALL_S, SimulatedTime

WORKLOAD = Path(__file__).parent / "workloads" / "bimodal_loader.py"
COMPUTE_S = 0.004  # each step's simulated compute
SLOW_S = 0.12  # the workload's stall on every fourth batch (bimodal_loader.SLOW_S)


class _SimTime:
    """Stands in for the `time` module where the window reads its clock and where the Dataset sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def bimodal(monkeypatch):
    """The bimodal workload on a simulated clock: (workload, clock)."""
    from perfscope.measure import clock as clock_module

    sim = _SimTime()
    workload = load_workload(WORKLOAD)
    monkeypatch.setitem(workload.dataset.__init__.__globals__, "time", sim)  # the workload module's `time`
    monkeypatch.setattr(clock_module, "time", sim)
    loss = workload.loss

    def timed_loss(model, batch):
        sim.now += COMPUTE_S
        return loss(model, batch)

    workload.loss = timed_loss
    return workload, sim


def _check_bimodal(steps: list[float], samples: int, wall_s: float, samples_per_s: float, data_wait_share: float) -> None:
    slow = [t for t in steps if t > 2 * COMPUTE_S]
    assert steps == pytest.approx([SLOW_S + COMPUTE_S if t in slow else COMPUTE_S for t in steps])  # the fixture
    assert len(slow) == len(steps) // 4, steps  # one batch in four stalls
    median = statistics.median(steps)
    assert median == pytest.approx(COMPUTE_S)
    assert wall_s == pytest.approx(sum(steps), rel=1e-9)  # every step, the slow ones included
    assert samples_per_s == pytest.approx(samples / wall_s, rel=1e-9)
    assert samples_per_s < 0.2 * (samples / len(steps)) / median  # far below the median-based figure (exactly 1/8 here)
    assert data_wait_share == pytest.approx(len(slow) * SLOW_S / wall_s, rel=1e-6)


@pytest.mark.slow
def test_analyze_trial_throughput_counts_the_slow_steps(bimodal) -> None:
    workload, _ = bimodal
    run = run_trial(workload, TrialConfig(micro_batch_size=8, steps=16, warmup_steps=2, device="cpu"))
    m = run.metrics
    (window,) = m.windows
    assert window.samples == 16 * 8 and m.samples_per_s is not None
    _check_bimodal(m.step_times_s, window.samples, window.wall_s, m.samples_per_s, m.data_wait_share)


def test_hooks_throughput_counts_the_slow_steps() -> None:
    """A real loop on simulated time: every fourth batch's next() stalls 1/8 s, every step computes 1/64 s. Of the
    20 timed steps (after 2 of warm-up) 5 stall: the throughput is 160 samples / (20/64 + 5/8 s) = 170.7 samples/s
    exactly, a third of the 512 samples/s a batch over the median (fast) step would claim."""
    time = SimulatedTime()
    workload = load_workload(WORKLOAD)
    model = workload.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def stalling_loader():
        for k in range(100):
            if k % 4 == 3:
                time.stall()  # blocked in next(): the data wait
            yield torch.randn(8, 16), torch.randint(0, 4, (8,))

    prof = Profiler(model, optimizer, device="cpu", warmup_steps=2, count_flops=False, measure_ceiling=False,
                    sample_utilization=False, peak_tflops=1.0, clock=time.clock())
    for i, batch in enumerate(prof.wrap(stalling_loader())):
        workload.loss(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad()
        time.spend(SIMULATED_COMPUTE_S)  # the step's compute
        prof.step()
        if i == 21:
            break
    m = prof.results().trials[0].metrics
    (window,) = m.windows
    wall = 20 * SIMULATED_COMPUTE_S + 5 * SIMULATED_STALL_S  # steps 3, 7, 11, 15 and 19 stall; 2..21 are timed
    assert (m.steps, window.samples, m.wall_s) == (20, 160, wall)
    assert sorted(m.step_times_s) == [SIMULATED_COMPUTE_S] * 15 + [SIMULATED_COMPUTE_S + SIMULATED_STALL_S] * 5
    assert m.samples_per_s == 160 / wall  # every timed step's samples over every timed step's wall, stalls included
    assert m.typical_step is not None and m.typical_step.median == SIMULATED_COMPUTE_S
    assert m.samples_per_s < 0.4 * 8 / m.typical_step.median  # not the batch over the median step (512 samples/s)
    assert m.data_wait_share == 5 * SIMULATED_STALL_S / wall  # exactly the stalls' share of the wall time


@pytest.mark.slow
def test_analyze_and_hooks_measure_a_workload_alike() -> None:
    """One measurement core: the same workload through run_trial and through Profiler gives the same FLOPs per
    step, samples per step and window bookkeeping, and throughput defined alike (their timings differ by run)."""
    path = Path(__file__).parent / "workloads" / "mlp.py"
    run = run_trial(load_workload(path), TrialConfig(micro_batch_size=8, steps=30, warmup_steps=3, device="cpu"))
    workload = load_workload(path)
    torch.manual_seed(0)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters())
    prof = Profiler(model, optimizer, device="cpu", warmup_steps=3, measure_ceiling=False, sample_utilization=False, peak_tflops=1.0)
    for i, batch in enumerate(prof.wrap(workload.batches(8))):
        workload.loss(model, batch).backward()
        optimizer.step()
        optimizer.zero_grad()
        prof.step()
        if i == 3 + 1 + 30 - 1:  # warm-up, the FLOP-counting step, 30 timed steps
            break
    hooked = prof.results().trials[0].metrics
    a, h = run.metrics, hooked
    assert a.flops_per_step == h.flops_per_step == 96256  # exact: see test_flops.py
    assert a.samples_per_step == h.samples_per_step == 8 and a.steps == h.steps == 30
    for m in (a, h):
        assert m.samples_per_s == pytest.approx(m.windows[0].samples / m.wall_s)

"""The timed window opens with the DataLoader's prefetch queue in steady state (trial/prefetch.py), not full of
batches the workers made during a slow warm-up."""

from __future__ import annotations

import time

import torch
from torch import nn

from perfscope.results.config import TrialConfig
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload

SAMPLE_S = 0.02  # the Dataset's cost per sample: one worker makes a batch of 2 in 40 ms at best
BATCH, STEPS = 2, 8


class _SlowDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SAMPLE_S)  # the workload's own data cost (a decode, a read), not a synchronization
        return torch.randn(4), torch.tensor(i % 2)


class _SlowFirstStep(nn.Module):
    """A first step with a one-time cost (compilation, autotuning): the worker fills its queue meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.first = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            self.first = False
            time.sleep(0.5)
        return self.linear(x)


def test_the_window_is_not_fed_by_batches_prefetched_during_warm_up() -> None:
    workload = Workload(model=_SlowFirstStep, dataset=_SlowDataset,
                        loss=lambda model, b: nn.functional.cross_entropy(model(b[0]), b[1]), batch_size=BATCH)
    config = TrialConfig(micro_batch_size=BATCH, steps=STEPS, warmup_steps=1, num_workers=1, prefetch_factor=4,
                         sample_utilization=False, count_flops=False)
    metrics = run_trial(workload, config).metrics
    # One worker delivers at most 1 batch per 2·SAMPLE_S; over the window it made at least STEPS - 1 of the STEPS
    # batches (the first may have been under way). Starting on a full queue (4 batches) read ~2× this bound.
    bound = BATCH * STEPS / ((STEPS - 1) * BATCH * SAMPLE_S)
    assert metrics.samples_per_s is not None and metrics.samples_per_s <= 1.05 * bound, (metrics.samples_per_s, bound)
    assert "prefetch queue (4 batches) used up and drained" in (metrics.calibration or "")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _fake_steps(clock: _Clock, waits: list[float]):
    """A step whose next() waits the given seconds in turn (then 0), and computes for 10 ms."""
    queue = iter(waits)

    def step(recorder) -> None:
        recorder.data_begin()
        clock.now += next(queue, 0.0)
        recorder.data_end()
        clock.now += 0.01

    return step


def test_warm_up_goes_on_until_next_blocks(monkeypatch) -> None:
    from perfscope.trial import prefetch

    clock = _Clock()
    monkeypatch.setattr(prefetch, "time", clock)
    config = TrialConfig(micro_batch_size=2, num_workers=2, prefetch_factor=2)
    # A queue of 4: four ready batches (2 ms each, a loaded machine's IPC), a fifth ready one, then a block.
    drain = prefetch.drain_prefetch(_fake_steps(clock, [0.002, 0.002, 0.002, 0.002, 0.003, 0.03]), config, [0.5, 0.01, 0.01])
    assert drain is not None and drain.drained and len(drain.times) == 6
    assert "drained" in drain.words


def test_a_loader_that_outpaces_the_step_keeps_its_queue_full(monkeypatch) -> None:
    from perfscope.trial import prefetch

    clock = _Clock()
    monkeypatch.setattr(prefetch, "time", clock)
    config = TrialConfig(micro_batch_size=2, num_workers=2, prefetch_factor=2)
    drain = prefetch.drain_prefetch(_fake_steps(clock, []), config, [0.5, 0.01, 0.01])
    assert drain is not None and not drain.drained
    assert len(drain.times) == prefetch.DRAIN_DEPTHS * 4  # four queue depths of 2 workers × 2 batches
    assert "without next() blocking" in drain.words
    assert prefetch.drain_prefetch(_fake_steps(clock, []), TrialConfig(micro_batch_size=2), [0.5]) is None

"""The timed window opens with the DataLoader's prefetch queue in steady state (trial/loop.py, drain_prefetch), not full of
batches the workers made during a slow warm-up.

The end-to-end test decides on which batches the window consumed, not on how fast it ran: every sample is
stamped, in the worker, with the phase the main process was in when the sample was made, so "the window was fed
by the warm-up's backlog" is a fact about identities that load cannot move. Whether the drain saw `next()` block
(and the throughput that follows) depends on timing: the drain's decision is tested here on a simulated clock,
and the real throughput against the worker's bound is printed by benchmarks/prefetch_window.py.
"""

from __future__ import annotations

import multiprocessing
import time

import torch
from torch import nn

from perfscope.measure.window import WindowRecorder
from perfscope.results.config import TrialConfig
from perfscope.trial import loop
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload
from tests.waiting import wait_for

SAMPLE_S = 0.02  # the Dataset's cost per sample: the workload's own data cost (a decode, a read)
BATCH, STEPS, WORKERS, PREFETCH = 2, 8, 1, 4
DEPTH = WORKERS * PREFETCH  # batches the loader keeps requested ahead of the loop
WARM_UP, AFTER_WARM_UP = 0, 1  # the stamps


class _StampedDataset(torch.utils.data.Dataset):
    """Each sample carries the main process's phase at the time a worker made it; `made` counts samples."""

    def __init__(self, phase, made) -> None:  # multiprocessing.Values, shared with the forked workers
        self.phase, self.made = phase, made

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        stamp = self.phase.value
        time.sleep(SAMPLE_S)  # the workload's own data cost, not a synchronization
        with self.made.get_lock():
            self.made.value += 1
        return torch.randn(4), torch.tensor(i % 2), torch.tensor(stamp)


def test_the_window_is_not_fed_by_batches_prefetched_during_warm_up(monkeypatch) -> None:
    phase, made = multiprocessing.Value("i", WARM_UP), multiprocessing.Value("i", 0)
    consumed: list[tuple[bool, int]] = []  # per batch the loop consumed: (inside the timed window, its stamp)
    in_window = [False]

    class _Window(WindowRecorder):
        def start(self) -> None:
            in_window[0] = True
            super().start()

        def finish(self):
            in_window[0] = False
            return super().finish()

    monkeypatch.setattr(loop, "WindowRecorder", _Window)

    def loss(model: nn.Module, batch) -> torch.Tensor:
        x, y, stamps = batch
        if not consumed:
            # A first step with a one-time cost (compilation, autotuning): the worker fills its queue meanwhile.
            # Waiting on the fill itself (the first batch and DEPTH more: as many as the loader requests) makes
            # the backlog certain on any machine, where a fixed sleep left it to the scheduler.
            wait_for(lambda: made.value >= (1 + DEPTH) * BATCH, "the worker to fill its prefetch queue")
            phase.value = AFTER_WARM_UP
        consumed.append((in_window[0], int(stamps.min())))
        return nn.functional.cross_entropy(model(x), y)

    workload = Workload(model=lambda: nn.Linear(4, 2), dataset=lambda: _StampedDataset(phase, made), loss=loss,
                        batch_size=BATCH)
    config = TrialConfig(micro_batch_size=BATCH, steps=STEPS, warmup_steps=1, num_workers=WORKERS,
                         prefetch_factor=PREFETCH, sample_utilization=False, count_flops=False)
    metrics = run_trial(workload, config).metrics

    window = [stamp for inside, stamp in consumed if inside]
    backlog = [i for i, (inside, stamp) in enumerate(consumed) if stamp == WARM_UP and i > 0]
    assert len(window) == STEPS, consumed
    assert len(backlog) == DEPTH, consumed  # the warm-up left a full queue: the case the drain exists for
    assert WARM_UP not in window, consumed  # ... and none of it reached the window
    # What the drain did is on the trial's calibration line (drained, or the loader kept up: timing decides which).
    assert f"prefetch queue ({DEPTH} batches) used up" in (metrics.calibration or ""), metrics.calibration


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def _fake_steps(clock: _Clock, waits: list[float]):
    """A step whose next() waits the given seconds in turn (then 0), and computes for 10 ms."""
    queue = iter(waits)

    def step(recorder) -> tuple[torch.Tensor, None]:
        recorder.data_begin()
        clock.now += next(queue, 0.0)
        recorder.data_end()
        clock.now += 0.01
        return torch.zeros(()), None  # TrainStep's (loss, grad norm)

    return step


def test_warm_up_goes_on_until_next_blocks(monkeypatch) -> None:
    from perfscope.trial import loop as prefetch

    clock = _Clock()
    monkeypatch.setattr(prefetch, "time", clock)
    config = TrialConfig(micro_batch_size=2, num_workers=2, prefetch_factor=2)
    # A queue of 4: four ready batches (2 ms each, a loaded machine's IPC), a fifth ready one, then a block.
    drain = prefetch.drain_prefetch(_fake_steps(clock, [0.002, 0.002, 0.002, 0.002, 0.003, 0.03]), config, [0.5, 0.01, 0.01])
    assert drain is not None and drain.drained and len(drain.times) == 6
    assert "drained" in drain.words


def test_a_loader_that_outpaces_the_step_keeps_its_queue_full(monkeypatch) -> None:
    from perfscope.trial import loop as prefetch

    clock = _Clock()
    monkeypatch.setattr(prefetch, "time", clock)
    config = TrialConfig(micro_batch_size=2, num_workers=2, prefetch_factor=2)
    drain = prefetch.drain_prefetch(_fake_steps(clock, []), config, [0.5, 0.01, 0.01])
    assert drain is not None and not drain.drained
    assert len(drain.times) == prefetch.DRAIN_DEPTHS * 4  # four queue depths of 2 workers × 2 batches
    assert "without next() blocking" in drain.words
    assert prefetch.drain_prefetch(_fake_steps(clock, []), TrialConfig(micro_batch_size=2), [0.5]) is None

"""A tiny data-parallel workload whose rank PERFSCOPE_TEST_RANK (default 1) misbehaves as PERFSCOPE_TEST_RANK_MODE says.

Modes: crash (raises), segfault, hang (sleeps forever), straggle (sleeps PERFSCOPE_TEST_STRAGGLE_S more per micro-batch:
a rank slower than its peers, deterministically, whatever the machine's load). The misbehaviour starts at the
rank's 3rd loss call, after the first warm-up step, as a real fault under load would.

With PERFSCOPE_TEST_SIM_CLOCK=1 each rank's step clocks (the timed window's and the local compute window's) read a
simulated clock that only the loss advances: 1 ms of compute per micro-batch (+0.1 ms every third, so the steps vary),
and the straggle instead of a real sleep. The step times are then exact on any machine; everything else is real.
"""

import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

_calls = 0


class _SimTime:
    """The `time` module, but perf_counter reads a clock only the loss advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


_sim: _SimTime | None = None
if os.environ.get("PERFSCOPE_TEST_SIM_CLOCK") == "1":
    import perfscope.measure.clock
    import perfscope.measure.window
    import perfscope.trial.rank

    _sim = _SimTime()
    for _module in (perfscope.measure.clock, perfscope.measure.window, perfscope.trial.rank):
        _module.time = _sim


def _misbehave() -> None:
    global _calls
    _calls += 1
    mode = os.environ.get("PERFSCOPE_TEST_RANK_MODE", "")
    if not mode or os.environ.get("RANK", "0") != os.environ.get("PERFSCOPE_TEST_RANK", "1"):
        return
    if mode == "straggle":
        straggle_s = float(os.environ.get("PERFSCOPE_TEST_STRAGGLE_S", "0.02"))
        if _sim is not None:
            _sim.now += straggle_s
        else:
            time.sleep(straggle_s)
    elif _calls >= 3:
        if mode == "crash":
            raise ValueError("shapes do not match (simulated bug on one rank)")
        if mode == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "hang":
            time.sleep(3600)


def batches(batch_size: int):
    g = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    while True:
        yield torch.randn(batch_size, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)


def loss(model, batch):
    if _sim is not None:
        _sim.now += 0.001 + (0.0001 if _calls % 3 == 0 else 0.0)  # the micro-batch's compute
    _misbehave()
    x, y = batch
    return F.cross_entropy(model(x), y)


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        batches=batches,
        loss=loss,
        batch_size=8,
    )

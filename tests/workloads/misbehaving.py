"""One workload, many ways to fail — chosen by PERFSCOPE_TEST_FAILURE, from the 2nd loss call on.

The first call (the harness's CPU dry run) always succeeds, as a real workload that fails only under
load would. Modes: oom, error, nan, hang, segfault, exit.
"""

import os
import signal
import time

import torch
import torch.nn.functional as F
from torch import nn

import perfscope

_calls = 0


class HangingDataset(torch.utils.data.Dataset):
    """Records the pid of the process that loads samples (a DataLoader worker), to check for zombies."""

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        pid_dir = os.environ.get("PERFSCOPE_TEST_PID_DIR")
        if pid_dir:
            open(os.path.join(pid_dir, f"{os.getpid()}.pid"), "w").close()
        return torch.randn(32), i % 10


def loss(model, batch):
    global _calls
    _calls += 1
    mode = os.environ.get("PERFSCOPE_TEST_FAILURE", "")
    if _calls >= 2:
        if mode == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
        if mode == "error":
            raise ValueError("shapes do not match (simulated bug in the user's loss)")
        if mode == "hang":
            if ready := os.environ.get("PERFSCOPE_TEST_HANG_FILE"):
                open(ready, "w").close()  # a test waits for this file, not for a guessed time
            time.sleep(3600)
        if mode == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "exit":
            os._exit(3)
    if mode == "segfault_in_trace" and torch.autograd._profiler_enabled():
        os.kill(os.getpid(), signal.SIGSEGV)  # only while the profiler traces: after the timed window
    x, y = batch
    out = F.cross_entropy(model(x), y)
    if mode == "nan" and _calls >= 2:
        out = out * float("nan")
    return out


def workload() -> perfscope.Workload:
    return perfscope.Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)),
        dataset=HangingDataset,
        loss=loss,
        batch_size=4,
        num_workers=int(os.environ.get("PERFSCOPE_TEST_WORKERS", "0")),
    )

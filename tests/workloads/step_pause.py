"""The tiny MLP of mlp.py, with a fixed 15 ms pause on the host in every micro-batch (a per-step overhead: a sleep,
so it costs no CPU and no neighbour's load can move it). Micro-batches of 4 with 4 accumulation steps: a micro-batch
of 16 with one step keeps the global batch and pays the pause once instead of 4 times — a large, certain gain that
the sweep's grad_accum knob finds on any machine, on a lane of one core as on a whole machine.

A test may hold a lane's trial in flight before its timed window: while the file named by
`PERFSCOPE_TEST_HOLD_FILE` exists, building the model on a lane of a parallel sweep waits (runs outside the lanes,
the probe and the sequential baseline, go on), and says so in `<hold file>.held-<pid>`, which holds its Slurm job's id under Slurm (the lanes' tests end
that job, or press Ctrl-C, while both lanes' trials are surely still running)."""

import os
import runpy
import time
from pathlib import Path

import perfscope
from perfscope.measure.contention import SWEEP_ROOT_ENV

PAUSE_S = 0.015
_MLP = runpy.run_path(str(Path(__file__).with_name("mlp.py")))


HOLD_ENV = "PERFSCOPE_TEST_HOLD_FILE"


def make_model():
    hold = os.environ.get(HOLD_ENV)
    if hold and os.environ.get(SWEEP_ROOT_ENV) and Path(hold).exists():  # a lane's trial, held
        Path(f"{hold}.held-{os.getpid()}").write_text(os.environ.get("SLURM_JOB_ID", ""))  # the job holding it
        while Path(hold).exists():
            time.sleep(0.05)
    return _MLP["make_model"]()


def loss(model, batch):
    time.sleep(PAUSE_S)
    return _MLP["loss"](model, batch)


def workload() -> perfscope.Workload:
    return perfscope.Workload(model=make_model, batches=_MLP["batches"], loss=loss, batch_size=4,
                              grad_accum_steps=4)

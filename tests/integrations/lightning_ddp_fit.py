"""`python lightning_ddp_fit.py OUT`: a 2-process DDP fit on the CPU (gloo) with perfscope's callback.

Run by tests/integrations/test_lightning.py::test_ddp_on_cpu_writes_the_jobs_results. Lightning's "ddp"
strategy starts the second process by running this script again, as a user's script would be. Each rank also
writes its own wall-clock throughput over the steps perfscope times (OUT/truth<rank>.txt) for the test.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch

from perfscope.hooks.integrations.lightning import PerfscopeCallback
from tests.integrations.test_lightning import BATCH, QUIET, WARMUP, Classifier, Clock, loader

STEPS = 16


def main(out: Path) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    clock = Clock()
    trainer = pl.Trainer(
        max_steps=STEPS, accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, default_root_dir=out / "lightning",
        callbacks=[PerfscopeCallback(out / "run", **QUIET), clock],
    )
    trainer.fit(Classifier(), loader(4 * BATCH * STEPS))
    (out / f"truth{trainer.global_rank}.txt").write_text(repr(clock.clock.samples_per_s(WARMUP + 1, STEPS)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))

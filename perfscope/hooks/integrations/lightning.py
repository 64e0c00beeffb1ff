"""perfscope in a Lightning Trainer: one callback, the same results.json as `perfscope analyze`.

    from perfscope.hooks.integrations.lightning import PerfscopeCallback
    trainer = lightning.Trainer(callbacks=[PerfscopeCallback("perfscope-run", precision="bf16")])

A "step" is an optimizer step (Lightning's `global_step` advancing), so `accumulate_grad_batches` shows as
micro-steps. Samples per micro-batch are read from each batch (first dimension of its first tensor).
Lightning owns the data loop, so the time blocked on data is not measured here. With several processes,
each rank writes to ``out_dir/rank<N>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl  # the older package name
    except ImportError as exc:
        raise ImportError("perfscope.hooks.integrations.lightning needs Lightning: pip install lightning") from exc

from perfscope.hooks.profiler import Profiler, leading_dim


class PerfscopeCallback(pl.Callback):
    """Profiles `trainer.fit`; ``profiler_kwargs`` go to perfscope.Profiler (name, precision, capture_steps, ...)."""

    def __init__(self, out_dir: str | os.PathLike[str] = "perfscope-run", **profiler_kwargs: Any) -> None:
        super().__init__()
        self.out_dir = Path(out_dir)
        self.profiler_kwargs = profiler_kwargs
        self.profiler: Profiler | None = None
        self._global_step = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizers = getattr(trainer, "optimizers", None) or [None]
        kwargs = {"device": pl_module.device, "name": type(pl_module).__name__, **self.profiler_kwargs}
        self.profiler = Profiler(pl_module, optimizer=optimizers[0], **kwargs)
        self._global_step = trainer.global_step

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.profiler is not None:
            self.profiler.micro_step(None if self.profiler.samples_per_step_given else leading_dim(batch))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.profiler is not None and trainer.global_step != self._global_step:
            self._global_step = trainer.global_step  # an optimizer step happened in this batch
            self.profiler.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.profiler is None:
            return
        world = getattr(trainer, "world_size", 1) or 1
        out = self.out_dir / f"rank{trainer.global_rank}" if world > 1 else self.out_dir
        self.profiler.save(out)

"""perfscope in a Lightning Trainer: one callback, the same results.json as `perfscope analyze`.

    from perfscope.hooks.integrations.lightning import PerfscopeCallback
    trainer = lightning.Trainer(callbacks=[PerfscopeCallback("perfscope-run")])

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl  # the older package name
    except ImportError as exc:
        raise ImportError("perfscope.hooks.integrations.lightning needs Lightning: pip install lightning") from exc

from perfscope.hooks.integrations import FitCallback
from perfscope.hooks.profiler import leading_dim

PRECISIONS: dict[str, tuple[str | None, str]] = {
    "32-true": ("fp32", "fp32"),
    "32": ("fp32", "fp32"),
    "bf16-mixed": ("bf16", "bf16 autocast"),
    "16-mixed": ("fp16", "fp16 autocast with a GradScaler"),
    "bf16-true": ("bf16", "weights and matmuls in bf16 (no autocast)"),
    "16-true": ("fp16", "weights and matmuls in fp16 (no autocast)"),
    "64-true": (None, "fp64"),
}
"""Lightning's precision setting -> (perfscope's precision, what it means)."""


def trainer_settings(trainer: Any) -> tuple[str | None, dict[str, Any]]:
    """(perfscope precision or None, the settings the report shows) as the trainer holds them."""
    name = str(getattr(trainer, "precision", "") or "")
    precision, meaning = PRECISIONS.get(name, (None, "not one perfscope knows"))
    strategy = getattr(trainer, "strategy", None)
    declared: dict[str, Any] = {
        "framework": f"Lightning {getattr(pl, '__version__', '?')}",
        "lightning_precision": f"{name}: {meaning}" if name else "not read",
        "accumulate_grad_batches": getattr(trainer, "accumulate_grad_batches", None),
        "devices": getattr(trainer, "num_devices", None),
        "num_nodes": getattr(trainer, "num_nodes", None),
        "world_size": getattr(trainer, "world_size", None),
        "strategy": type(strategy).__name__ if strategy is not None else None,
    }
    backend = getattr(strategy, "process_group_backend", None)
    if backend:
        declared["process_group_backend"] = backend
    return precision, {k: v for k, v in declared.items() if v is not None}


def trainer_loggers(trainer: Any) -> list[Any]:
    """The experiments of the Trainer's TensorBoard, W&B and MLflow loggers, that perfscope's figures go to as well
    (rank 0's: Lightning's loggers write from rank 0 only). perfscope.hooks.loggers has the names."""
    if (getattr(trainer, "global_rank", 0) or 0) != 0:
        return []
    found: list[Any] = []
    for logger in getattr(trainer, "loggers", None) or []:
        kind = type(logger).__name__
        try:
            if kind in ("TensorBoardLogger", "WandbLogger"):
                found.append(logger.experiment)  # a SummaryWriter; a wandb Run
            elif kind == "MLFlowLogger":
                found.append((logger.experiment, logger.run_id))  # an MlflowClient and the logger's run
        except Exception as exc:  # noqa: BLE001 - the logger's own problem, which its own calls will show
            warnings.warn(f"perfscope: not logging to {kind} ({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=2)
    return found


class PerfscopeCallback(FitCallback, pl.Callback):
    """Profiles `trainer.fit`; ``profiler_kwargs`` go to perfscope.Profiler (name, warmup_steps, capture_steps, ...).

    perfscope's figures go to the Trainer's TensorBoard, W&B and MLflow loggers too (``loggers=[]`` to keep them out)."""

    def __init__(self, out_dir: str | os.PathLike[str] = "perfscope-run", **profiler_kwargs: Any) -> None:
        super().__init__(out_dir, **profiler_kwargs)
        self._global_step = 0
        self._fetch_loop: Any = None  # the epoch loop whose fetch hooks we wrap

    # --- fit start and end

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        precision, declared = trainer_settings(trainer)
        optimizers = getattr(trainer, "optimizers", None) or [None]
        defaults = {"device": pl_module.device, "name": type(pl_module).__name__, "precision": precision,
                    "loggers": trainer_loggers(trainer)}
        prof = self._start(pl_module, optimizers[0], defaults, rank=getattr(trainer, "global_rank", 0) or 0,
                           world_size=getattr(trainer, "world_size", 1) or 1)
        self._global_step = trainer.global_step
        if not prof.enabled:
            return
        data_wait = "Lightning's fetch timing (train_dataloader_next)" if self._wrap_fetches(trainer) else \
            "the gap between one training batch's end and the next one's start (this Lightning has no fetch hooks)"
        compiled = getattr(pl_module, "_compiler_ctx", None) is not None  # trainer.fit(torch.compile(module))
        prof.describe(declared={**declared, "data_wait": data_wait, **self.folder.declared}, compile="default" if compiled else None)
        loader = getattr(trainer, "train_dataloader", None)
        prof.describe_loader(loader)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish()  # what was measured before the failure (or Ctrl-C) is kept

    def _finish(self) -> None:
        self._unwrap_fetches()
        self._save()

    # --- steps

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        prof = self.profiler
        if prof is None:
            return
        prof.resume()  # no-op unless a pause is still open (no fetch hook to end it)
        if self._fetch_loop is None:
            prof.data_end()
        prof.micro_step(None if prof.samples_per_step_given else leading_dim(batch))
        prof.batch_begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        prof = self.profiler
        if prof is None:
            return
        if trainer.global_step != self._global_step:
            self._global_step = trainer.global_step  # an optimizer step happened in this batch
            prof.step()
        if self._fetch_loop is None:
            prof.data_begin()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.profiler is not None:
            self.profiler.resume()  # a checkpoint saved at the last epoch's end is over; a new iterator is data work

    # --- framework pauses

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.profiler is not None and not getattr(trainer, "sanity_checking", False):
            self.profiler.pause("evaluation")

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self.profiler is not None:
            self.profiler.pause("checkpoint saving")  # Lightning calls this before writing: resumed at the next fetch

    # --- data wait through Lightning's fetch hooks

    def _wrap_fetches(self, trainer: Any) -> bool:
        """Wrap the training epoch loop's `_on_before_fetch` / `_on_after_fetch` (what Lightning calls around
        next() on the train DataLoader, every epoch); False when this Lightning has no such hooks."""
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        before, after = getattr(loop, "_on_before_fetch", None), getattr(loop, "_on_after_fetch", None)
        if not (callable(before) and callable(after)):
            return False

        def on_before_fetch() -> None:
            prof = self.profiler
            if prof is not None:
                prof.resume()  # the pause (checkpoint saving) ends where training asks for data again
                prof.data_begin()
            before()

        def on_after_fetch() -> None:
            after()
            if self.profiler is not None:
                self.profiler.data_end()

        loop._on_before_fetch, loop._on_after_fetch = on_before_fetch, on_after_fetch
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)  # an epoch already running holds the originals
        if fetcher is not None and getattr(fetcher, "_start_profiler", None) == before:
            fetcher._start_profiler, fetcher._stop_profiler = on_before_fetch, on_after_fetch
        self._fetch_loop = loop
        return True

    def _unwrap_fetches(self) -> None:
        loop, self._fetch_loop = self._fetch_loop, None
        if loop is not None:
            vars(loop).pop("_on_before_fetch", None)
            vars(loop).pop("_on_after_fetch", None)

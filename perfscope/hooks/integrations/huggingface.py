"""perfscope in a Hugging Face `transformers.Trainer`: one callback, the same results.json as `perfscope analyze`.

    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PerfscopeTrainerCallback("perfscope-run")])

A "step" is the Trainer's optimizer step; with `gradient_accumulation_steps` each micro-batch is a
micro-step (`on_substep_end`). The callbacks do not see batches, so samples per micro-batch are taken from
`per_device_train_batch_size` (pass samples_per_step= when the last batch is often short) and the time
blocked on data is not measured. With several processes, each rank writes to ``out_dir/rank<N>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("perfscope.hooks.integrations.huggingface needs transformers: pip install transformers") from exc

from perfscope.hooks import Profiler


class PerfscopeTrainerCallback(TrainerCallback):
    """Profiles `trainer.train()`; ``profiler_kwargs`` go to perfscope.Profiler (name, precision, capture_steps, ...)."""

    def __init__(self, out_dir: str | os.PathLike[str] = "perfscope-run", **profiler_kwargs: Any) -> None:
        self.out_dir = Path(out_dir)
        self.profiler_kwargs = profiler_kwargs
        self.profiler: Profiler | None = None
        self._micro_samples: int | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
        defaults = {"device": args.device, "name": type(model).__name__ if model is not None else "hf-trainer", "precision": precision}
        self.profiler = Profiler(model, optimizer=optimizer, **{**defaults, **self.profiler_kwargs})
        self._micro_samples = None if self.profiler.samples_per_step_given else args.per_device_train_batch_size

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.micro_step(self._micro_samples)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.micro_step(self._micro_samples)  # the last micro-batch of this optimizer step
            self.profiler.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is None:
            return
        world = getattr(args, "world_size", 1) or 1
        out = self.out_dir / f"rank{args.process_index}" if world > 1 else self.out_dir
        self.profiler.save(out)

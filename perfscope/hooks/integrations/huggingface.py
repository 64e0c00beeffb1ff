"""perfscope in a Hugging Face `transformers.Trainer`: one callback, the same results.json as `perfscope analyze`.

    from perfscope.hooks.integrations.huggingface import PerfscopeTrainerCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[PerfscopeTrainerCallback("perfscope-run")])

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("perfscope.hooks.integrations.huggingface needs transformers: pip install transformers accelerate") from exc

import torch

from perfscope.hooks.integrations import FitCallback
from perfscope.hooks.profiler import leading_dim


def args_settings(args: Any, model: Any) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(perfscope precision, TrialConfig fields, the settings the report shows) from TrainingArguments."""
    weights = next((p.dtype for p in model.parameters()), None) if isinstance(model, torch.nn.Module) else None
    if getattr(args, "bf16", False):
        precision, meaning = "bf16", "bf16 autocast (TrainingArguments.bf16)"
    elif getattr(args, "fp16", False):
        precision, meaning = "fp16", "fp16 autocast with a GradScaler (TrainingArguments.fp16)"
    elif weights in (torch.bfloat16, torch.float16):
        precision = "bf16" if weights == torch.bfloat16 else "fp16"
        meaning = f"weights loaded in {precision}, no autocast"
    elif weights == torch.float32:
        precision, meaning = "fp32", "fp32"
    else:
        precision, meaning = None, f"weights in {weights}"
    config: dict[str, Any] = {
        "activation_checkpointing": bool(getattr(args, "gradient_checkpointing", False)),
        "compile": "default" if getattr(args, "torch_compile", False) else None,
    }
    mode = getattr(args, "parallel_mode", None)
    declared: dict[str, Any] = {
        "framework": f"transformers {transformers.__version__}", "hf_precision": meaning,
        **{name: getattr(args, name, None) for name in ("gradient_accumulation_steps", "per_device_train_batch_size",
                                                        "world_size", "n_gpu")},
        "parallel_mode": getattr(mode, "value", mode),
    }
    if getattr(args, "fsdp", None):
        declared["fsdp"] = str(args.fsdp)
    if getattr(args, "deepspeed", None):
        declared["deepspeed"] = "configured"
    return precision, config, {k: v for k, v in declared.items() if v is not None}


def reported_to(args: Any) -> list[Any]:
    """Where the Trainer reports (``report_to``) and perfscope can write too, from the main process: W&B's and
    MLflow's active runs (their callbacks start them), and for TensorBoard a SummaryWriter of perfscope's own: in
    TENSORBOARD_LOGGING_DIR (or the older ``logging_dir``) when set, where the Trainer writes too, else in
    <output_dir>/runs/perfscope, a run beside the Trainer's time-stamped one under <output_dir>/runs."""
    if not getattr(args, "should_log", True):
        return []
    report_to = getattr(args, "report_to", None) or []
    report_to = [report_to] if isinstance(report_to, str) else list(report_to)
    found: list[Any] = [name for name in ("wandb", "mlflow") if name in report_to]
    if "tensorboard" in report_to:
        folder = os.getenv("TENSORBOARD_LOGGING_DIR") or getattr(args, "logging_dir", None)
        try:
            from torch.utils.tensorboard import SummaryWriter

            found.append(SummaryWriter(log_dir=folder or os.path.join(args.output_dir, "runs", "perfscope")))
        except Exception as exc:  # noqa: BLE001 - no tensorboard package, a folder not writable: not the run's problem
            warnings.warn(f"perfscope: not logging to TensorBoard ({type(exc).__name__}: {exc})", RuntimeWarning,
                          stacklevel=2)
    return found


class PerfscopeTrainerCallback(FitCallback, TrainerCallback):
    """Profiles `trainer.train()`; ``profiler_kwargs`` go to perfscope.Profiler (name, warmup_steps, capture_steps, ...)."""

    def __init__(self, out_dir: str | os.PathLike[str] = "perfscope-run", **profiler_kwargs: Any) -> None:
        super().__init__(out_dir, **profiler_kwargs)
        self._default_samples: int | None = None
        self._in_step = False
        self._seen: list[int] = []  # micro-batch sizes the forward hook saw since the last micro-step mark
        self._seq_lens: set[int] = set()
        self._hook: Any = None

    # --- train start and end

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        precision, config, declared = args_settings(args, model)
        defaults = {"device": args.device, "name": type(model).__name__ if model is not None else "hf-trainer", "precision": precision,
                    "loggers": reported_to(args) if "loggers" not in self.profiler_kwargs else ()}
        prof = self._start(model, optimizer, defaults, rank=getattr(args, "process_index", 0) or 0,
                           world_size=getattr(args, "world_size", 1) or 1)
        if not prof.enabled:
            return
        prof.describe(declared={**declared, **self.folder.declared}, **config)
        prof.describe_loader(train_dataloader)
        self._default_samples = None if prof.samples_per_step_given else args.per_device_train_batch_size
        self._seen, self._seq_lens, self._in_step = [], set(), False
        if isinstance(model, torch.nn.Module) and not prof.samples_per_step_given and not getattr(args, "torch_compile", False):
            self._hook = model.register_forward_pre_hook(self._on_forward, with_kwargs=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        prof = self.profiler
        if prof is not None and prof.enabled and prof.tokens_per_sample is None and len(self._seq_lens) == 1:
            prof.tokens_per_sample = next(iter(self._seq_lens))
            prof.describe(declared={"tokens_per_sample": f"{prof.tokens_per_sample}: the length of input_ids (padding included)"})
        self._save()

    # --- steps

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.data_end()  # the step's micro-batches were fetched just before this
            self.profiler.batch_begin()
            self._in_step = True

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.micro_step(self._samples())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None:
            self.profiler.micro_step(self._samples())  # the last micro-batch of this optimizer step
            self.profiler.step()
            self._in_step = False
            self.profiler.data_begin()

    # --- framework work between steps

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profiler is not None and not self._in_step:
            self.profiler.data_begin()  # logging is the loop's own work, not a wait for data

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._exclude("evaluation")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._exclude("checkpoint saving")

    def _exclude(self, reason: str) -> None:
        if self.profiler is not None and not self._in_step:
            self.profiler.exclude_since_step(reason)
            self.profiler.data_begin()

    # --- samples

    def _on_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._in_step:
            return  # evaluation and prediction forwards are not training samples
        n = leading_dim(kwargs) if kwargs else None
        if n is None:
            n = leading_dim(args)
        if n is not None:
            self._seen.append(n)
        ids = kwargs.get("input_ids") if kwargs else None
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            self._seq_lens.add(int(ids.shape[1]))

    def _samples(self) -> int | None:
        seen, self._seen = self._seen, []
        return sum(seen) if seen else self._default_samples

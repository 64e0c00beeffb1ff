"""One optimizer step of a trial: the step the measured loop (perfscope.trial.loop) times, and the base of a
pipeline rank's step (perfscope.trial.pipeline_parallel.PipelineStep).

Design notes: docs/measurement.md."""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager, ExitStack
from typing import Any

import torch
from torch import nn

from perfscope.knobs import Knob, active_knobs, loader_options
from perfscope.knobs.apply.checkpointing import CheckpointedBlock, checkpointing_off
from perfscope.measure.flops import FALLBACK_COUNT_MICRO_BATCH, StepFlopCounter, count_step, count_step_on_fake_tensors
from perfscope.measure.structure import StructureCounter
from perfscope.measure.tokens import TokenTally, per_token_scale
from perfscope.measure.window import WindowRecorder
from perfscope.results.config import TrialConfig
from perfscope.results.fingerprint import Fingerprint
from perfscope.results.messages import Message, msg
from perfscope.trial.data import endless_batches, to_device
from perfscope.trial.data_parallel import constructor_keys, gradient_sync, shard_optimizer, wrap_model
from perfscope.workload import Workload


class TrainStep:
    """One optimizer step: grad_accum_steps micro-batches, the active knobs' contexts and loss scaler,
    zero_grad(set_to_none)."""

    def __init__(self, workload: Workload, config: TrialConfig) -> None:
        self.workload, self.config = workload, config
        self.device = config.device
        self.knobs: list[Knob] = active_knobs(config)
        torch.manual_seed(config.seed)
        self.model = self.prepared(workload.model().to(self.device))
        self.checkpointed = [m for m in self.model.modules() if isinstance(m, CheckpointedBlock)]
        self.model.train()
        self.wrapped = wrap_model(self.model, config, self.device, workload=workload)
        """The module each step runs: the model, or its DDP / FSDP2 wrapper on a data-parallel rank."""
        self.optimizer = shard_optimizer(build_optimizer(workload, self.wrapped, config), config)
        self.step_model: Any = self.wrapped
        for knob in self.knobs:
            self.step_model = knob.apply_to_step_module(self.step_model, config)
        self.scaler = next((s for k in self.knobs if (s := k.grad_scaler(config)) is not None), None)
        self.batches = endless_batches(workload, config)
        self.non_blocking = bool(loader_options(config).get("pin_memory")) and self.device == "cuda"
        self.steps_done = 0
        """Optimizer steps taken so far: the training-step number a trace labels its steps by."""
        self.window_tokens: TokenTally | None = None  # set during the timed window: each micro-batch's tokens

    def prepared(self, model: Any) -> Any:
        """A freshly built model as the active knobs want it (checkpointed blocks, channels_last)."""
        for knob in self.knobs:
            model = knob.apply_to_model(model, self.config, self.workload)
        return model

    def on_device(self, batch: Any, *, non_blocking: bool) -> Any:
        """A batch copied to the device, as the active knobs want it (channels_last inputs)."""
        batch = to_device(batch, self.device, non_blocking=non_blocking)
        for knob in self.knobs:
            batch = knob.apply_to_batch(batch, self.config)
        return batch

    def contexts(self, which: str) -> AbstractContextManager[Any]:
        """The active knobs' contexts of one kind ("loss_context", "step_context", "window_context"), entered in order."""
        stack = ExitStack()
        for context in [c for k in self.knobs if (c := getattr(k, which)(self.config)) is not None]:
            stack.enter_context(context)
        return stack

    def next_batch(self, recorder: WindowRecorder | None) -> Any:
        # The data span covers next() only: the host-to-device copy below is not data loading.
        with torch.profiler.record_function("perfscope::data"):
            if recorder is not None:
                recorder.data_begin()
            batch = next(self.batches)
            if recorder is not None:
                recorder.data_end()
        if self.window_tokens is not None:
            self.window_tokens.add(batch)
        with torch.profiler.record_function("perfscope::h2d"):
            return self.on_device(batch, non_blocking=self.non_blocking)

    def micro_loss(self, model: Any, batch: Any) -> torch.Tensor:
        with self.contexts("loss_context"):  # autocast
            return self.workload.loss(model, batch)

    def __call__(self, recorder: WindowRecorder | None = None, *, grad_norm: bool = False) -> tuple[torch.Tensor, float | None]:
        """Returns (mean loss as a device tensor, first-step grad norm when asked)."""
        total = self.accumulate(recorder)
        norm = None
        if grad_norm:
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            grads = [_full(p.grad).detach().float().norm() for p in self.model.parameters() if p.grad is not None]
            norm = float(torch.stack(grads).norm()) if grads else 0.0
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return total / self.config.grad_accum_steps, norm

    def accumulate(self, recorder: WindowRecorder | None, *, sync: bool = True) -> torch.Tensor:
        """Forward and backward of the step's micro-batches; the sum of their losses. ``sync`` False: no gradient
        communication at all (a rank's compute alone: perfscope.trial.rank.local_compute_window)."""
        accum = self.config.grad_accum_steps
        total = torch.zeros((), device=self.device)
        for i in range(accum):
            batch = self.next_batch(recorder)
            # no_sync: the gradients of all micro-batches but the last stay local (one all-reduce per step).
            with gradient_sync(self.wrapped, enabled=sync and (not self.config.no_sync or i == accum - 1)):
                with self.contexts("step_context"):  # e.g. activation offloading's saved-tensor hooks
                    loss = self.micro_loss(self.step_model, batch)
                scaled = loss / accum
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            total += loss.detach().float()
        return total

    def count_flops(self, tokens: TokenTally | None = None) -> tuple[float, float, list[Message]]:
        """(model FLOPs, hardware FLOPs, notes) per optimizer step, on the eager model: one micro-batch × accum.
        On fake tensors, so the count cannot OOM where the trial fit; else one small real step, scaled linearly."""
        micro, accum = self.config.micro_batch_size, self.config.grad_accum_steps

        def on_device(batch: Any) -> Any:
            return self.on_device(batch, non_blocking=False)

        def plain(counter: StepFlopCounter) -> AbstractContextManager[None]:
            return checkpointing_off(self.checkpointed)

        model = self.model
        if self.config.data_parallel == "fsdp" or self.config.tensor_parallel > 1:
            # Sharded parameters are DTensors: count on a fresh, unsharded copy, on the host (FLOPs do not depend on
            # where they run, and fake tensors allocate nothing).
            model = self.prepared(self.workload.model())

            def on_device(batch: Any) -> Any:
                return batch

        fake_batch = counted_batch = next(self.batches)
        try:
            counter = count_step_on_fake_tensors(model, fake_batch, self.micro_loss, around=plain, prepare=on_device)
            as_run = (count_step_on_fake_tensors(model, fake_batch, self.micro_loss, prepare=on_device)
                      if self.checkpointed else counter)
            scale = 1.0
            how = [msg("flops_fake_tensors", micro=micro)]
        except Exception as exc:  # noqa: BLE001 - an op without a fake kernel, a data-dependent shape, ...
            small = min(micro, FALLBACK_COUNT_MICRO_BATCH)
            loader_config = self.config.replace(micro_batch_size=small, num_workers=0, persistent_workers=False,
                                                prefetch_factor=None, pin_memory=False)
            batch = counted_batch = on_device(next(endless_batches(self.workload, loader_config)))
            counter = count_step(model, batch, self.micro_loss, around=plain)
            as_run = count_step(model, batch, self.micro_loss) if self.checkpointed else counter
            self.optimizer.zero_grad(set_to_none=True)
            scale = micro / small
            first_line = str(exc).splitlines()[0][:160] if str(exc) else ""
            why = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
            how = [msg("flops_fake_failed", error=why, small=small, scale=scale, micro=micro)]
        if (per_token := per_token_scale(counted_batch, tokens)) is not None:
            scale = per_token.factor
            how.append(per_token.note)
        model_flops = counter.model_total * scale * accum
        hardware_flops = as_run.total * scale * accum
        notes: list[Message] = [*how, *counter.notes]
        if (tp := self.config.tensor_parallel) > 1:  # each rank of a TP group computes its share of one replica's step
            model_flops, hardware_flops = model_flops / tp, hardware_flops / tp
            notes.append(msg("flops_tp_share", tp=tp))
        if self.checkpointed:
            extra = as_run.total / counter.total - 1 if counter.total else 0.0
            notes.append(msg("flops_checkpointing", blocks=len(self.checkpointed), extra=extra))
        return model_flops, hardware_flops, notes

    def count_structure(self) -> Fingerprint:
        """One real optimizer step (the trial's own: micro-batch, accumulation, autocast, optimizer) under a
        counting dispatch mode: the structural fingerprint. Run after the timed window; it trains one more step."""
        with StructureCounter(self.device) as counter:
            self()
        method = ("one real optimizer step after the timed window, counted under a dispatch mode "
                  f"(micro-batch {self.config.micro_batch_size} × {self.config.grad_accum_steps})")
        if self.config.compile is not None:
            method += "; torch.compile does not trace under a dispatch mode, so ops are those of the eager step"
        return counter.fingerprint(method=method)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) gradient gathered whole, so its norm is the model's, not this rank's shard's."""
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


EIGHT_BIT_CLASSES = {"Adam": "Adam8bit", "AdamW": "AdamW8bit"}
"""The 8-bit counterpart of each optimizer that has one (same algorithm, quantized moments)."""
EIGHT_BIT_MODULES = {"8bit-torchao": "torchao.optim", "8bit-bnb": "bitsandbytes.optim"}
"""Where each implementation's classes live (torchao: public since 0.10, the oldest the adamw_8bit knob accepts)."""


def build_optimizer(workload: Workload, model: nn.Module, config: TrialConfig) -> torch.optim.Optimizer:
    """The optimizer ``config`` asks for, on the model's trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    user = workload.optimizer(params)
    if config.optimizer == "adafactor":
        return _adafactor(user, config.optimizer_impl)
    if config.optimizer in EIGHT_BIT_MODULES:
        return _eight_bit(user, config.optimizer, config.optimizer_impl)
    if config.optimizer_impl == "default":
        return user
    accepted = constructor_keys(user, frozenset({"foreach", "fused"}))  # rebuilt without the implementation flags
    groups = [{k: v for k, v in g.items() if k == "params" or k in accepted} for g in user.param_groups]
    defaults = {k: v for k, v in user.defaults.items() if k in accepted}
    return type(user)(groups, **defaults, **{config.optimizer_impl: True})


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    cls = type(optimizer)
    return f"{cls.__module__}.{cls.__qualname__}"


def _groups(user: torch.optim.Optimizer, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The user's parameter groups with only ``keys`` carried over (where the group has them)."""
    return [{"params": g["params"], **{k: g[k] for k in keys if k in g}} for g in user.param_groups]


def _adafactor(user: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    adafactor = getattr(torch.optim, "Adafactor", None)
    if adafactor is None:
        raise RuntimeError(f"torch.optim.Adafactor needs torch >= 2.5 (this torch: {torch.__version__})")
    if impl == "fused":
        raise ValueError("torch.optim.Adafactor has no fused implementation")
    return adafactor(_groups(user, ("lr", "weight_decay")), **({"foreach": True} if impl == "foreach" else {}))


def _eight_bit(user: torch.optim.Optimizer, choice: str, impl: str) -> torch.optim.Optimizer:
    name = EIGHT_BIT_CLASSES.get(type(user).__name__)
    if name is None:
        raise ValueError(f"no 8-bit counterpart of {type(user).__name__} (8-bit state is for {', '.join(EIGHT_BIT_CLASSES)})")
    if impl != "default":
        raise ValueError(f"8-bit {name} has no {impl} implementation")
    cls = getattr(importlib.import_module(EIGHT_BIT_MODULES[choice]), name)
    return cls(_groups(user, ("lr", "betas", "eps", "weight_decay", "amsgrad")))

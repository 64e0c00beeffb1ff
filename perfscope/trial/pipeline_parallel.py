"""Pipeline parallelism inside a trial rank: PyTorch's pipelining engine driving the measured loop's steps.

Design notes: docs/measurement.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from perfscope.knobs import active_knobs
from perfscope.knobs.apply.checkpointing import find_repeated_blocks
from perfscope.knobs.apply.tensors import map_tensors
from perfscope.measure.bubble import StepRecord
from perfscope.measure.clock import synchronize
from perfscope.results.messages import Message, msg
from perfscope.trial.data import endless_batches
from perfscope.trial.step import TrainStep, build_optimizer

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}


class _Inputs(Exception):
    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__("captured")
        self.args, self.kwargs = args, kwargs


class _Recorder(nn.Module):
    """Stands in for the model inside the user's loss: records what the loss passes to it."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise _Inputs(args, kwargs)


class _Output(nn.Module):
    """Stands in for the model inside the user's loss on the last stage: returns the stage's output."""

    def __init__(self, output: Any) -> None:
        super().__init__()
        self.output = output

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.output


def model_inputs(loss: Callable[[nn.Module, Any], torch.Tensor], batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What the user's loss passes to the model for ``batch``."""
    try:
        loss(_Recorder(), batch)
    except _Inputs as got:
        return got.args, got.kwargs
    raise ValueError("the workload's loss never called the model: its inputs cannot be known")


def rows(batch: Any, index: torch.Tensor) -> Any:
    """The batch's rows ``index`` (every tensor with a leading batch dimension)."""
    return map_tensors(batch, lambda t: t.index_select(0, index.to(t.device)) if t.dim() else t)


def concat(batches: list[Any]) -> Any:
    """Micro-batches joined along the batch dimension, in order."""
    first = batches[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(batches) if first.dim() else first
    if isinstance(first, dict):
        return {k: concat([b[k] for b in batches]) for k in first}
    if isinstance(first, list | tuple):
        items = [concat([b[i] for b in batches]) for i in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    return first


def split_points(model: nn.Module, stages: int, workload: Any | None = None) -> list[str]:
    """Module names where stages 1.. begin: the workload's, else equal shares of the repeated blocks."""
    if workload is not None and getattr(workload, "pipeline_split", None) is not None:
        points = list(workload.pipeline_split(model))
        if len(points) != stages - 1:
            raise ValueError(f"Workload.pipeline_split gave {len(points)} split points for {stages} stages")
        return points
    blocks = find_repeated_blocks(model)
    if len(blocks) < stages:
        raise ValueError(f"{len(blocks)} repeated blocks cannot fill {stages} pipeline stages")
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(blocks[i * len(blocks) // stages])] for i in range(1, stages)]


class PipelineStep(TrainStep):
    """One optimizer step of a pipeline rank: the schedule's step() over the step's m micro-batches."""

    def __init__(self, workload: Any, config: Any) -> None:  # noqa: D107 - see the class docstring
        from torch.distributed import pipelining

        if config.activation_checkpointing or config.compile is not None or config.precision == "fp16":
            raise ValueError("pipeline trials run without activation checkpointing, torch.compile and fp16 GradScaler")
        self.workload, self.config = workload, config
        self.knobs = active_knobs(config)  # the loop asks every step for its knobs (TF32, GC, …)
        self.device = config.device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.virtual = 2 if config.pipeline_schedule == "interleaved_1f1b" else 1
        torch.manual_seed(config.seed)
        full = workload.model()
        self.checkpointed, self.batches = [], endless_batches(workload, config)
        self.non_blocking, self.scaler, self.steps_done, self.window_tokens = False, None, 0, None
        example = self.next_batch(None)
        args, kwargs = model_inputs(workload.loss, example)
        stages = self.world * self.virtual
        split = {name: pipelining.SplitPoint.BEGINNING for name in split_points(full, stages, workload)}
        full.to(self.device)
        pipe = pipelining.pipeline(full, mb_args=args, mb_kwargs=kwargs or None, split_spec=split)
        device = torch.device(self.device, torch.cuda.current_device()) if self.device == "cuda" else torch.device("cpu")
        self.stages = [pipe.build_stage(self.rank + i * self.world, device) for i in range(self.virtual)]
        self.model = nn.ModuleList(s.submod for s in self.stages)
        self.model.train()
        self.wrapped = self.step_model = self.model
        self.optimizer = build_optimizer(workload, self.model, config)
        self.holds_first = any(s.is_first for s in self.stages)
        self.holds_last = any(s.is_last for s in self.stages)
        cls = getattr(pipelining, SCHEDULES[config.pipeline_schedule])
        self.schedule = cls(self.stages if self.virtual > 1 else self.stages[0], config.grad_accum_steps,
                            loss_fn=self._loss)
        self.records: list[StepRecord] = []
        self._current = StepRecord()
        self._batch: Any = None
        for stage in self.stages:
            stage.forward_one_chunk = self._timed(stage.forward_one_chunk, "forward")  # type: ignore[method-assign]
            stage.backward_one_chunk = self._timed(stage.backward_one_chunk, "backward")  # type: ignore[method-assign]

    def _compute_clock(self) -> tuple[str, Callable[[], float]]:
        """How a call's compute is timed immune to load (perfscope.measure.bubble): CPU time on CPU (the thread's
        when torch computes on it alone), the synchronized wall clock on CUDA."""
        if self.device == "cuda":
            return "wall", time.perf_counter
        if torch.get_num_threads() == 1:
            return "thread CPU", time.thread_time
        return "process CPU", time.process_time

    def _timed(self, call: Callable[..., Any], kind: str) -> Callable[..., Any]:
        clock_name, clock = self._compute_clock()

        def timed(*args: Any, **kwargs: Any) -> Any:
            synchronize(self.device)
            start, compute_start = time.perf_counter(), clock()
            out = call(*args, **kwargs)
            synchronize(self.device)
            elapsed, compute = time.perf_counter() - start, clock() - compute_start
            record = self._current
            record.compute_clock = clock_name
            setattr(record, f"{kind}_s", getattr(record, f"{kind}_s") + elapsed)
            getattr(record, f"{kind}_calls_s").append(compute)
            return out
        return timed

    def _loss(self, output: Any, index: torch.Tensor) -> torch.Tensor:
        _, clock = self._compute_clock()
        start, compute_start = time.perf_counter(), clock()
        with self.contexts("loss_context"):
            loss = self.workload.loss(_Output(output), rows(self._batch, index))
        synchronize(self.device)
        self._current.loss_s += time.perf_counter() - start
        self._current.loss_compute_s += clock() - compute_start
        return loss

    def pipeline_order(self) -> dict[int, list[Any]] | None:
        """The schedule's per-rank action lists (torch's), for the bubble replay."""
        return getattr(self.schedule, "pipeline_order", None)

    def __call__(self, recorder: Any = None, *, grad_norm: bool = False) -> tuple[torch.Tensor, float | None]:
        m = self.config.grad_accum_steps
        self._batch = concat([self.next_batch(recorder) for _ in range(m)])
        index = torch.arange(self.config.micro_batch_size * m, device=self.device)
        args, kwargs = model_inputs(self.workload.loss, self._batch) if self.holds_first else ((), {})
        losses: list[torch.Tensor] = []
        self._current = StepRecord(in_window=self.window_tokens is not None)
        start = time.perf_counter()
        with self.contexts("loss_context"):
            self.schedule.step(*args, target=index, losses=losses, return_outputs=False, **kwargs)
        synchronize(self.device)
        self._current.step_s = time.perf_counter() - start
        self.records.append(self._current)
        loss = (torch.stack([v.detach().float() for v in losses]).mean() if losses
                else torch.zeros((), device=self.device))
        dist.broadcast(loss, src=(self.world * self.virtual - 1) % self.world)  # the rank of the last stage
        norm = None
        if grad_norm:
            squares = torch.zeros((), device=self.device)
            for p in self.model.parameters():
                if p.grad is not None:
                    squares += p.grad.detach().float().pow(2).sum()
            dist.all_reduce(squares)
            norm = float(squares.sqrt())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_done += 1
        return loss, norm

    def count_flops(self, tokens: Any = None) -> tuple[float, float, list[Message]]:
        """The whole model's step (on a fresh, unsplit copy) ÷ stages: each rank computes its stages' share."""
        staged, micro = self.model, self.config.micro_batch_size
        self.model = self.workload.model().to(self.device)
        try:
            model_flops, hardware_flops, notes = super().count_flops(tokens)
        finally:
            self.model = staged
        n = self.config.pipeline_parallel
        return model_flops / n, hardware_flops / n, [*notes, msg("flops_pipeline_share", micro=micro,
                                                                 accumulation=self.config.grad_accum_steps, stages=n)]

    def count_structure(self) -> Any:
        raise NotImplementedError("a pipeline step runs point-to-point sends between ranks; it is not counted under a "
                                  "dispatch mode (a rank whose count failed mid-step would leave its peer waiting)")

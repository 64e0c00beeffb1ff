"""perfscope's figures in the logger the user already reads: TensorBoard, Weights & Biases, MLflow.

    prof = perfscope.Profiler(model, opt, loggers=[writer])            # or wandb.run, "wandb", "mlflow", an mlflow Run
    prof = perfscope.Profiler(model, opt, loggers=Loggers([writer], every=100))

One name scheme everywhere (NAMES); the table and each library's details: docs/hooks.md.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfscope.measure.window import StepRecord
    from perfscope.results import Results

PREFIX = "perfscope/"
NAMES = ("step_time_s", "samples_per_s", "mfu", "data_wait_share", "exposed_comm_s", "peak_memory_bytes")
EVERY = 50
"""Timed steps per logged interval, by default."""


class Sink:
    name: str

    def log(self, figures: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Only TensorBoard's writer buffers; the other libraries send as they log."""


@dataclass
class TensorBoardSink(Sink):
    writer: Any
    """A torch.utils.tensorboard SummaryWriter (anything with add_scalar)."""
    name: str = "TensorBoard"

    def log(self, figures: dict[str, float], step: int) -> None:
        for key, value in figures.items():
            self.writer.add_scalar(key, value, global_step=step)

    def flush(self) -> None:
        self.writer.flush()


@dataclass
class WandbSink(Sink):
    run: Any
    """A wandb Run, or the wandb module (its active run at each log)."""
    name: str = "Weights & Biases"
    _defined: set[int] = field(default_factory=set)

    def log(self, figures: dict[str, float], step: int) -> None:
        run = self.run.run if getattr(self.run, "__name__", "") == "wandb" else self.run
        if run is None:
            return  # no active run (yet): nothing to log into
        if id(run) not in self._defined:
            run.define_metric(f"{PREFIX}step")
            run.define_metric(f"{PREFIX}*", step_metric=f"{PREFIX}step")
            self._defined.add(id(run))
        run.log({**figures, f"{PREFIX}step": step}, commit=False)


@dataclass
class MlflowSink(Sink):
    client: Any
    """The mlflow module (its active run) or an MlflowClient, with ``run_id`` for the latter."""
    run_id: str | None = None
    name: str = "MLflow"

    def log(self, figures: dict[str, float], step: int) -> None:
        if self.run_id is None:
            if self.client.active_run() is not None:
                self.client.log_metrics(figures, step=step)
            return
        for key, value in figures.items():
            self.client.log_metric(self.run_id, key, value, step=step)


def sink_for(target: Any) -> Sink:
    """The sink for what the user passed; TypeError naming what is accepted otherwise."""
    module = getattr(target, "__name__", None) if isinstance(target, type(sys)) else None
    if target == "wandb" or module == "wandb":
        return WandbSink(sys.modules["wandb"] if target == "wandb" else target)
    if target == "mlflow" or module == "mlflow":
        import mlflow

        return MlflowSink(mlflow)
    if hasattr(target, "add_scalar"):
        return TensorBoardSink(target)
    if isinstance(target, tuple) and len(target) == 2 and hasattr(target[0], "log_metric"):
        return MlflowSink(target[0], str(target[1]))
    if hasattr(target, "info") and hasattr(target.info, "run_id"):  # an mlflow Run
        from mlflow.tracking import MlflowClient

        return MlflowSink(MlflowClient(), target.info.run_id)
    if hasattr(target, "log") and hasattr(target, "define_metric"):
        return WandbSink(target)
    raise TypeError(f"perfscope: cannot log to {target!r}: pass a SummaryWriter, a wandb Run (or 'wandb'), "
                    "'mlflow' (the active run), an mlflow Run or (MlflowClient, run_id)")


def as_loggers(loggers: Loggers | Iterable[Any], *, device: Any, peak_tflops: float | None,
               flops_per_step: Callable[[], float | None]) -> Loggers | None:
    """The Profiler's `loggers=` argument as a Loggers fed by its steps (None when there is none)."""
    made = loggers if isinstance(loggers, Loggers) else Loggers(loggers)
    if not made.sinks:
        return None
    from perfscope.measure.memory import peak_memory_reader  # torch-bound: imported once loggers are in use

    made.peak_tflops, made.flops_per_step, made.peak_memory = peak_tflops, flops_per_step, peak_memory_reader(device)
    return made


class Loggers:
    """The figures of each interval of ``every`` timed steps, and of the run at save(), into every sink."""

    def __init__(self, targets: Iterable[Any], *, every: int = EVERY) -> None:
        if every < 1:
            raise ValueError(f"perfscope: Loggers(every=...) must be >= 1, got {every}")
        self.sinks: list[Sink] = [sink_for(t) for t in targets]
        self.every = every
        self._steps, self._time, self._wait, self._samples = 0, 0.0, 0.0, 0
        self._samples_known = True
        self.flops_per_step: Callable[[], float | None] = lambda: None
        self.peak_tflops: float | None = None
        self.peak_memory: Callable[[], int | None] = lambda: None

    def add(self, record: StepRecord) -> None:
        """One timed step (the window recorder's on_step); every ``every`` of them, one logged interval."""
        self._steps += 1
        self._time += record.time_s
        self._wait += record.data_wait_s
        if record.samples is None:
            self._samples_known = False
        else:
            self._samples += record.samples
        if self._steps < self.every:
            return
        steps, wall = self._steps, self._time
        figures = {"step_time_s": wall / steps, "data_wait_share": self._wait / wall if wall > 0 else 0.0}
        if self._samples_known and wall > 0:
            figures["samples_per_s"] = self._samples / wall
        flops = self.flops_per_step()
        if flops and self.peak_tflops and wall > 0:
            figures["mfu"] = flops * steps / wall / (self.peak_tflops * 1e12)
        if (memory := self.peak_memory()) is not None:
            figures["peak_memory_bytes"] = float(memory)
        self._steps, self._time, self._wait, self._samples, self._samples_known = 0, 0.0, 0.0, 0, True
        self.log(figures, record.index + 1)

    def final(self, results: Results, step: int) -> None:
        """The run's own figures (what the report shows), once, at save()."""
        metrics = results.trials[0].metrics if results.trials else None
        if metrics is None or not self.sinks:
            return
        figures: dict[str, float | None] = {
            "step_time_s": metrics.wall_s / metrics.steps if metrics.steps else None,
            "samples_per_s": metrics.samples_per_s, "mfu": metrics.mfu, "data_wait_share": metrics.data_wait_share,
            "peak_memory_bytes": metrics.peak_memory_bytes}
        comm = metrics.distributed.communication if metrics.distributed is not None else None
        if comm is not None:
            figures["exposed_comm_s"] = comm.exposed_collective_s
        self.log({k: float(v) for k, v in figures.items() if v is not None}, step)
        for sink in list(self.sinks):
            self._call(sink, sink.flush)

    def log(self, figures: dict[str, float], step: int) -> None:
        named = {PREFIX + key: value for key, value in figures.items()}
        for sink in list(self.sinks):
            self._call(sink, lambda s=sink: s.log(named, step))

    def _call(self, sink: Sink, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a logger's failure is not the job's
            self.sinks.remove(sink)
            warnings.warn(f"perfscope: stopped logging to {sink.name} after an error: {type(exc).__name__}: {exc}",
                          RuntimeWarning, stacklevel=2)

"""The workload contract: what a user's file gives perfscope, and how it is loaded and checked.

Design notes: docs/internals.md."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from perfscope.errors import WorkloadError
from perfscope.precision import Precision

if TYPE_CHECKING:  # torch only in annotations: the knob registry imports Workload, and `perfscope report` reads the
    import torch  # knobs' words without importing torch (~1.5 s, ~300 MB; tests/test_torch_free.py)
    from torch import nn


def _default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    import torch

    return torch.optim.AdamW(params, lr=1e-4)


@dataclass(kw_only=True)
class Workload:
    """A trainable workload described by factories, plus the settings of the user's current loop."""

    model: Callable[[], nn.Module]
    """Returns a fresh nn.Module on the CPU; the harness moves it to the device."""
    loss: Callable[[nn.Module, Any], torch.Tensor]
    """loss(model, batch) -> scalar tensor. ``batch`` is already on the device."""
    batch_size: int
    """The user's micro-batch size (samples per forward pass)."""
    dataset: Callable[[], Any] | None = None
    """Returns a torch Dataset (map-style or iterable); perfscope wraps it in a DataLoader it controls."""
    batches: Callable[[int], Iterable[Any]] | None = None
    """batches(batch_size) -> iterable of ready batches (synthetic data). Exclusive with ``dataset``."""
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] = _default_optimizer
    """optimizer(params) -> a torch optimizer. Defaults to AdamW(lr=1e-4)."""
    collate_fn: Callable[[list[Any]], Any] | None = None
    tokens_per_sample: int | None = None
    """Optional: tokens per sample, to report tokens/s."""
    name: str | None = None
    grad_accum_steps: int = 1
    """The user's gradient accumulation: global batch per rank = batch_size x grad_accum_steps."""
    precision: Precision = "fp32"
    """What the user's loop runs today: fp32, or autocast bf16 / fp16 (+GradScaler)."""
    num_workers: int = 0
    pin_memory: bool = False
    checkpoint_blocks: Callable[[nn.Module], list[nn.Module]] | None = None
    """Optional override: the modules to activation-checkpoint (default: auto-detected repeated blocks)."""
    tensor_parallel_plan: Callable[[nn.Module], dict[str, str]] | None = None
    """Optional override: tensor_parallel_plan(model) -> {module name: "colwise" | "rowwise" | "sequence" |
    "colwise_dtensor"} (perfscope.trial.tensor_parallel), the styles `parallelize_module` applies; default: derived
    from the blocks' attention and MLP projections."""
    pipeline_split: Callable[[nn.Module], list[str]] | None = None
    """Optional override: pipeline_split(model) -> the module names each later pipeline stage begins at
    (SplitPoint.BEGINNING); default: equal shares of the repeated blocks."""
    wraps_model: bool = False
    """Distributed runs: ``model()`` already returns the wrapped model (the user's own DDP / FSDP); the harness
    initializes the process group before calling it and wraps nothing, so the data-parallel knobs do not apply."""
    data_parallel: Literal["ddp", "fsdp", "zero1"] = "ddp"
    """Distributed runs: how the user's loop wraps the model today (the baseline runs it)."""
    no_sync: bool = False
    """Distributed runs with accumulation: the user's loop already skips the gradient sync on all micro-batches but
    the last (DDP ``no_sync()``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes recorded with the results (never interpreted)."""

    def __post_init__(self) -> None:
        if not callable(self.model):
            raise WorkloadError("Workload.model must be a callable returning a fresh nn.Module (e.g. lambda: MyNet())")
        if not callable(self.loss):
            raise WorkloadError("Workload.loss must be a callable loss(model, batch) -> scalar tensor")
        if (self.dataset is None) == (self.batches is None):
            raise WorkloadError("Workload needs exactly one of dataset= (a Dataset factory) or batches= (a batch generator)")
        for name in ("dataset", "batches", "optimizer", "collate_fn", "checkpoint_blocks", "tensor_parallel_plan",
                     "pipeline_split"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise WorkloadError(f"Workload.{name} must be a callable (a factory), got {type(value).__name__}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise WorkloadError(f"Workload.batch_size must be a positive int, got {self.batch_size!r}")
        if not isinstance(self.grad_accum_steps, int) or self.grad_accum_steps < 1:
            raise WorkloadError(f"Workload.grad_accum_steps must be a positive int, got {self.grad_accum_steps!r}")
        if self.tokens_per_sample is not None and (not isinstance(self.tokens_per_sample, int) or self.tokens_per_sample < 1):
            raise WorkloadError(f"Workload.tokens_per_sample must be a positive int, got {self.tokens_per_sample!r}")
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise WorkloadError(f"Workload.precision must be 'fp32', 'bf16' or 'fp16', got {self.precision!r}")
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise WorkloadError(f"Workload.num_workers must be an int >= 0, got {self.num_workers!r}")
        if self.data_parallel not in ("ddp", "fsdp", "zero1"):
            raise WorkloadError(f"Workload.data_parallel must be 'ddp', 'fsdp' or 'zero1', got {self.data_parallel!r}")

    def declared(self) -> dict[str, Any]:
        """The plain settings, for the results file."""
        plain = ("batch_size", "grad_accum_steps", "tokens_per_sample", "precision", "num_workers", "pin_memory")
        return {**{name: getattr(self, name) for name in plain}, "data": "dataset" if self.dataset is not None else "batches",
                "wraps_model": self.wraps_model, "data_parallel": self.data_parallel, "no_sync": self.no_sync,
                "extra": {k: repr(v) for k, v in self.extra.items()}}


# ------------------------------------------------------------------------------------------ loading


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _user_frame(exc: BaseException, path: Path) -> str:
    """'file:line' of the deepest traceback frame inside the user's file, or just the file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
    return f"{path}:{frames[-1].lineno}" if frames else str(path)


def describe_user_exception(exc: BaseException, path: Path, during: str) -> str:
    """A one-paragraph message: where in the user's file, while doing what, and the exception itself."""
    return f"{_user_frame(exc, path)}: {during} raised {type(exc).__name__}: {exc}"


@contextmanager
def user_code(path: Path, during: str) -> Iterator[None]:
    """Any error the user's code raises inside, as a WorkloadError naming where in their file and while doing what."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - any error in user code is the user's to see
        raise WorkloadError(describe_user_exception(exc, path, during)) from exc


def load_workload(path: str | Path) -> Workload:
    """Import the user's file by path and call its ``workload()``. Raises WorkloadError on any violation."""
    path = Path(path).resolve()
    if not path.exists():
        raise WorkloadError(f"{path}: no such file")
    if path.suffix != ".py":
        raise WorkloadError(f"{path}: expected a Python file (.py)")
    module_name = f"perfscope_user_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered so that classes defined in the file can be pickled (DataLoader workers) and the file's
    # folder is importable, as it would be when the user runs the script directly.
    sys.modules[module_name] = module
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise WorkloadError(f"{exc.filename or path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - any error in user code is the user's to see
        raise WorkloadError(describe_user_exception(exc, path, "importing the file")) from exc
    factory = getattr(module, "workload", None)
    if factory is None:
        raise WorkloadError(f"{path}: defines no workload() function; it must return perfscope.Workload(...)")
    if not callable(factory):
        raise WorkloadError(f"{path}: `workload` must be a function returning perfscope.Workload(...)")
    try:
        result = factory()
    except WorkloadError as exc:
        raise WorkloadError(f"{_user_frame(exc, path)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(describe_user_exception(exc, path, "workload()")) from exc
    if not isinstance(result, Workload):
        raise WorkloadError(f"{path}: workload() returned {type(result).__name__}, expected perfscope.Workload(...)")
    if result.name is None:
        result.name = path.stem
    return result

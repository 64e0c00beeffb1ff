"""TrialConfig: everything that defines one measured configuration of a workload.

    >>> TrialConfig(device="cpu", micro_batch_size=8).replace(precision="bf16")

A trial is a pure function of (workload file, TrialConfig): the config travels to the trial process as
JSON, and knobs (perfscope.search.knobs) produce new configs by `replace`. Fields describe *what to run*, never
how it will be ranked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from perfscope.precision import Precision

CompileMode = Literal["default", "reduce-overhead", "max-autotune"]
OptimizerImpl = Literal["default", "foreach", "fused"]
OptimizerChoice = Literal["user", "adafactor", "8bit-torchao", "8bit-bnb"]
GcMode = Literal["default", "freeze", "disable"]


@dataclass(kw_only=True, frozen=True)
class TrialConfig:
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the trial runs."""
    micro_batch_size: int
    """Samples per forward pass."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; a "step" below is one optimizer step."""
    steps: int | None = None
    """Timed optimizer steps; None calibrates them so the window lasts at least ``min_window_s``."""
    warmup_steps: int = 5
    """Untimed optimizer steps before timing (allocator, cuDNN autotune, compile). At least 1 is run under
    torch.compile and 3 under CUDA graphs (reduce-overhead), whatever is asked: see `effective_warmup_steps`."""
    min_window_s: float = 0.5
    """Calibration: the timed window lasts at least this long (pyperf-style), so the timer's resolution,
    GC pauses and the data pipeline's fill-and-drain cycles are inside it."""
    min_steps: int = 10
    """Calibration: at least this many timed steps."""
    max_steps: int = 2000
    """Calibration: at most this many timed steps (a very fast step)."""
    precision: Precision = "fp32"
    """fp32, or autocast bf16 / fp16 (fp16 adds a GradScaler)."""
    tf32: bool | None = None
    """Matmul TF32 (perfscope.measure.tf32): True/False set it; None leaves the user's (or torch's) setting, so the
    baseline runs with whatever the user's file sets. cuDNN's TF32 (on by default) is never touched."""
    activation_checkpointing: bool = False
    """Non-reentrant checkpointing of the repeated blocks."""
    num_workers: int = 0
    """DataLoader workers (dataset workloads only)."""
    pin_memory: bool = False
    """Pinned host batches and non_blocking copies to the device."""
    prefetch_factor: int | None = None
    """Batches prefetched per worker (needs num_workers > 0); None keeps torch's default."""
    persistent_workers: bool = False
    compile: CompileMode | None = None
    """torch.compile mode, or None for eager."""
    optimizer_impl: OptimizerImpl = "default"
    """Rebuild the user's optimizer with foreach=True or fused=True."""
    optimizer: OptimizerChoice = "user"
    """The user's optimizer, or a memory-lean replacement built from its parameter groups (perfscope.trial.optimizers):
    torch.optim.Adafactor, or the 8-bit Adam/AdamW of torchao or bitsandbytes. A replacement changes the training
    recipe."""
    offload_activations: bool = False
    """Saved activations wait in pinned host memory between forward and backward
    (torch.autograd.graph.save_on_cpu(pin_memory=True))."""
    channels_last: bool = False
    """Model and 4-D inputs in channels_last memory format."""
    gc_mode: GcMode = "default"
    """Python GC during steps: default, gc.freeze() after warm-up, or disabled during steps."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for the trial process (e.g. PYTORCH_CUDA_ALLOC_CONF)."""
    seed: int = 0
    """Same seed in every trial: same initial weights and batches, so losses are comparable."""
    count_flops: bool = True
    capture_trace: bool = False
    """Profile a short extra window after the timed steps."""
    sample_utilization: bool = True

    def __post_init__(self) -> None:
        for name in ("micro_batch_size", "grad_accum_steps", "min_steps", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrialConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"TrialConfig.steps must be >= 1 or None (calibrate), got {self.steps}")
        if self.warmup_steps < 0 or self.num_workers < 0:
            raise ValueError("TrialConfig.warmup_steps and num_workers must be >= 0")
        if self.prefetch_factor is not None and self.num_workers == 0:
            raise ValueError("TrialConfig.prefetch_factor needs num_workers > 0")
        if self.persistent_workers and self.num_workers == 0:
            raise ValueError("TrialConfig.persistent_workers needs num_workers > 0")

    def replace(self, **changes: Any) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown TrialConfig fields: {sorted(unknown)}")
        return cls(**data)

    @property
    def effective_warmup_steps(self) -> int:
        """Compile needs one untimed step to compile; CUDA graphs need a few more to record before replaying."""
        floor = {"reduce-overhead": 3, "max-autotune": 3, "default": 1}.get(self.compile or "", 0)
        return max(self.warmup_steps, floor)

    @property
    def samples_per_step(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps

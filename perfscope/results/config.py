"""TrialConfig: everything that defines one measured configuration of a workload.

    >>> TrialConfig(device="cpu", micro_batch_size=8).replace(precision="bf16")

Design notes: docs/results.md.
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
DataParallel = Literal["none", "ddp", "fsdp", "zero1"]
CommHook = Literal["bf16", "fp16", "powersgd"]
PipelineSchedule = Literal["gpipe", "1f1b", "interleaved_1f1b"]


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
    """Calibration: the timed window lasts at least this long (pyperf-style; docs/measurement.md)."""
    min_steps: int = 10
    """Calibration: at least this many timed steps."""
    max_steps: int = 2000
    """Calibration: at most this many timed steps (a very fast step)."""
    precision: Precision = "fp32"
    """fp32, or autocast bf16 / fp16 (fp16 adds a GradScaler)."""
    tf32: bool | None = None
    """Matmul TF32 (perfscope.tf32_api); None leaves the user's setting (the baseline's). cuDNN's is never touched."""
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
    """The user's optimizer, or a memory-lean replacement built from its parameter groups (Adafactor, torchao's or
    bitsandbytes' 8-bit Adam: perfscope.trial.step.build_optimizer); a replacement changes the training recipe."""
    offload_activations: bool = False
    """Saved activations wait in pinned host memory between forward and backward
    (torch.autograd.graph.save_on_cpu(pin_memory=True))."""
    channels_last: bool = False
    """Model and 4-D inputs in channels_last memory format."""
    gc_mode: GcMode = "default"
    """Python GC during steps: default, gc.freeze() after warm-up, or disabled during steps."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for the trial process (e.g. PYTORCH_CUDA_ALLOC_CONF)."""
    knob_settings: dict[str, bool | int | float | str] = field(default_factory=dict)
    """Settings of knobs that own no field here, by knob id: a knob added in one file needs no edit of this class."""
    nproc_per_node: int = 1
    """Ranks per node: more than one rank in all is a torchrun job, every rank measured (perfscope.trial.launch)."""
    nnodes: int = 1
    data_parallel: DataParallel = "none"
    """How the harness wraps the model on every rank: DDP, FSDP2 (`fully_shard`), DDP + ZeroRedundancyOptimizer
    (ZeRO-1), or none (one process, or a model the user's factory already wraps)."""
    reshard_after_forward: bool = True
    """FSDP2: free the gathered parameters after forward (≈ ZeRO-3) or keep them until backward (≈ ZeRO-2)."""
    fsdp_mixed_precision: Literal["bf16", "fp16"] | None = None
    """FSDP2 MixedPrecisionPolicy: parameters gathered and gradients reduced in this dtype (None: fp32)."""
    bucket_cap_mb: float | None = None
    """DDP gradient bucket size (None: torch's default, 25 MB)."""
    gradient_as_bucket_view: bool = False
    """DDP: gradients are views into the all-reduce buckets (no copy, less memory)."""
    static_graph: bool = False
    """DDP static_graph=True: the set of used parameters is the same every step."""
    no_sync: bool = False
    """With accumulation, all micro-batches but the last skip the gradient sync (DDP `no_sync()`, FSDP2
    `set_requires_gradient_sync(False)`): one all-reduce per optimizer step instead of one per micro-batch."""
    comm_hook: CommHook | None = None
    """DDP communication hook: gradients all-reduced in bf16 / fp16, or PowerSGD's low-rank approximation."""
    tensor_parallel: int = 1
    """Ranks that split each block's matmuls (torch.distributed.tensor.parallel, perfscope.trial.tensor_parallel);
    with data_parallel="fsdp" the mesh is 2-D: dp × tp."""
    pipeline_parallel: int = 1
    """Pipeline stages, one per rank (torch.distributed.pipelining, perfscope.trial.pipeline_parallel); the
    pipeline's micro-batches are the step's ``grad_accum_steps`` micro-batches of ``micro_batch_size``."""
    pipeline_schedule: PipelineSchedule = "gpipe"
    """ScheduleGPipe, Schedule1F1B, or ScheduleInterleaved1F1B (two stages per rank)."""
    numa_binding: str | None = None
    """torchrun --numa-binding (PyTorch ≥ 2.9): each rank on the CPUs of its GPU's NUMA node."""
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
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise ValueError("TrialConfig.nproc_per_node and nnodes must be >= 1")
        if self.data_parallel != "none" and self.world_size == 1:
            raise ValueError(f"TrialConfig.data_parallel={self.data_parallel!r} needs more than one rank")
        self._check_model_parallel()
        ddp_only = {"bucket_cap_mb": self.bucket_cap_mb is not None, "gradient_as_bucket_view": self.gradient_as_bucket_view,
                    "static_graph": self.static_graph, "comm_hook": self.comm_hook is not None}
        for name, set_ in ddp_only.items():
            if set_ and self.data_parallel not in ("ddp", "zero1"):
                raise ValueError(f"TrialConfig.{name} is a DDP setting; data_parallel is {self.data_parallel!r}")
        if self.bucket_cap_mb is not None and not self.bucket_cap_mb > 0:
            raise ValueError(f"TrialConfig.bucket_cap_mb must be > 0, got {self.bucket_cap_mb}")
        if self.fsdp_mixed_precision is not None and self.data_parallel != "fsdp":
            raise ValueError("TrialConfig.fsdp_mixed_precision needs data_parallel='fsdp'")

    def _check_model_parallel(self) -> None:
        """TP and PP layouts perfscope can run: TP alone or under FSDP2 (2-D mesh), PP alone (one stage per rank)."""
        tp, pp = self.tensor_parallel, self.pipeline_parallel
        if tp < 1 or pp < 1:
            raise ValueError("TrialConfig.tensor_parallel and pipeline_parallel must be >= 1")
        if tp * pp == 1:
            return
        if tp > 1 and pp > 1:
            raise ValueError("TrialConfig: tensor and pipeline parallelism together (3-D) are not supported")
        if self.world_size % (tp * pp):
            raise ValueError(f"TrialConfig: world size {self.world_size} is not a multiple of tp × pp = {tp * pp}")
        if pp > 1 and (self.data_parallel != "none" or self.world_size != pp):
            raise ValueError("TrialConfig.pipeline_parallel runs one stage per rank, without data parallelism")
        if tp > 1 and self.data_parallel not in ("none", "fsdp"):
            raise ValueError("TrialConfig.tensor_parallel composes with FSDP2 only (data_parallel 'none' or 'fsdp')")
        if tp > 1 and (self.data_parallel == "fsdp") != (self.world_size > tp):
            raise ValueError("TrialConfig.tensor_parallel: data_parallel='fsdp' exactly when world size > tp")
        if pp > 1 and self.pipeline_schedule == "interleaved_1f1b" and self.grad_accum_steps % pp:
            raise ValueError("TrialConfig: the interleaved schedule needs micro-batches divisible by the stages")

    @property
    def model_parallel(self) -> int:
        """Ranks that share one replica of the model (tp × pp): they all see the same samples."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def data_parallel_size(self) -> int:
        return self.world_size // self.model_parallel

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
        """Samples per optimizer step on one rank."""
        return self.micro_batch_size * self.grad_accum_steps

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def global_batch(self) -> int:
        """micro-batch × accumulation × data-parallel ranks (ranks of one TP/PP replica share their samples)."""
        return self.samples_per_step * self.data_parallel_size

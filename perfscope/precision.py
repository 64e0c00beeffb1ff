"""The training precisions perfscope knows, in one place (the workload contract and TrialConfig share it).

Design notes: docs/internals.md."""

from typing import Literal

Precision = Literal["fp32", "bf16", "fp16"]
"""fp32 (TF32 matmuls where enabled), or autocast to bf16 / fp16 (fp16 with a GradScaler)."""

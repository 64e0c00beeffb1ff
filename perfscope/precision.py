"""The training precisions perfscope knows, in one place (the workload contract and TrialConfig share it).

Its own module, free of imports, so that `import perfscope` (and a disabled Profiler) stays light.
"""

from typing import Literal

Precision = Literal["fp32", "bf16", "fp16"]
"""fp32 (TF32 matmuls where enabled), or autocast to bf16 / fp16 (fp16 with a GradScaler)."""

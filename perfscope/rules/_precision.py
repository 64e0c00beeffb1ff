"""Whether the loop's matmuls run in fp32, from typed facts: shared by PS101 (autocast) and PS102 (TF32).

Design notes (why not just the config; the evidence, in order): docs/rules.md.
"""

from __future__ import annotations

from perfscope.rules._text import pct
from perfscope.rules.engine import RuleContext

MOSTLY = 0.5
"""fp32 when at least this share of the matmul FLOPs (or GEMM kernel time) is fp32."""


def fp32_matmuls(ctx: RuleContext) -> str | None:
    """Why the loop's matmuls run in fp32 (one line for a finding's evidence); None when they do not, or nothing says
    they do."""
    # The share of the counted step's matmul/conv/attention FLOPs with fp32 inputs; None when none were counted.
    shares = ctx.metrics.fingerprint.matmul_dtype_shares() if ctx.metrics.fingerprint is not None else {}
    share = shares.get("fp32", 0.0) if shares else None
    if share is not None and share < MOSTLY:
        return None  # most of the matmul FLOPs already run in reduced precision
    if "precision" not in ctx.baseline.unknown_settings:
        return "the loop runs in fp32 (no autocast)" if ctx.config("precision") == "fp32" else None
    if share is not None:
        return f"{pct(share)} of the counted step's matmul FLOPs have fp32 inputs (no autocast)"
    gemm_fp32 = ctx.facts.kernels.fp32_gemm_fraction if ctx.facts else None
    if gemm_fp32 is not None and gemm_fp32 >= MOSTLY:
        return "the loop's precision was not observed; its GEMM kernels' names say fp32"
    return None


def bf16_capable(compute_capability: str | None) -> bool | None:
    """Whether a CUDA device has bf16 tensor cores (compute capability 8.0, Ampere, and later); None when unknown."""
    try:
        return float(compute_capability) >= 8.0 if compute_capability else None
    except ValueError:
        return None

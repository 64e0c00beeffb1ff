"""Analytic FLOP counts the tests compare perfscope's counted FLOPs against."""

from __future__ import annotations


def linear_training_flops(batch: int, in_features: int, out_features: int, *, input_requires_grad: bool) -> int:
    """Forward 2·b·i·o; backward: weight grad 2·b·i·o, plus input grad 2·b·i·o unless it is the first layer."""
    per_gemm = 2 * batch * in_features * out_features
    return per_gemm * (3 if input_requires_grad else 2)


def transformer_training_flops_per_token(
    *, n_params_non_embedding: int, n_layers: int, d_model: int, seq_len: int
) -> float:
    """6·N + 12·L·d·T (PaLM appendix B; nanoGPT estimate_mfu): matmul FLOPs per token, fwd + bwd, no causal halving."""
    return 6.0 * n_params_non_embedding + 12.0 * n_layers * d_model * seq_len

"""Attention backward's QKᵀ recompute is hardware FLOPs, not model FLOPs (PaLM): measure/flops.py (RecomputeTally)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perfscope.measure.flops import StepFlopCounter, count_step, count_step_on_fake_tensors
from perfscope.results.messages import msg

B, H, S, D = 2, 4, 16, 8


class _Attention(nn.Module):
    """Only SDPA, on learnable q, k, v: every counted FLOP is attention."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Parameter(torch.randn(B, H, S, D)) for _ in range(3))

    def forward(self, _: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(self.q, self.k, self.v)


def _loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    return model(batch).sum()


@pytest.mark.parametrize("count", [count_step, count_step_on_fake_tensors])
def test_cpu_sdpa_model_flops_are_forward_plus_twice_forward(count) -> None:
    """Per attention: forward QKᵀ and PV (2 × 2·b·h·s²·d); model backward 4 matmuls; the kernel's backward also
    recomputes QKᵀ (one more 2·b·h·s²·d), which only the hardware count keeps."""
    counter = count(_Attention(), torch.zeros(1), _loss)
    one_matmul = 2 * B * H * S * S * D
    assert counter.forward == 2 * one_matmul
    assert counter.model_total == 6 * one_matmul  # 3 × forward: PaLM's 12·L·H·Q·T per token
    assert counter.total == 7 * one_matmul and counter.attention_recompute == one_matmul
    assert msg("attention_recompute_excluded", share=pytest.approx(1 / 7)) in counter.notes


def test_cuda_fused_attention_backward_recompute_counted_on_fake_tensors() -> None:
    """The memory-efficient kernel's backward (CUDA, shapes only): the same split."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(B, H, S, D, device="cuda")
        kv = torch.empty(B, 2, S, D, device="cuda")
        out = torch.empty(B, H, S, D, device="cuda")
        lse = torch.empty(B, H, S, device="cuda")
        seed = torch.empty((), dtype=torch.int64, device="cuda")
        with StepFlopCounter() as counter:
            torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                out, q, kv.repeat_interleave(2, 1), kv.repeat_interleave(2, 1), None, out, lse, seed, seed, 0.0,
                [True, True, True, False])
    one_matmul = 2 * B * H * S * S * D
    assert counter.total == 5 * one_matmul and counter.attention_recompute == one_matmul
    assert counter.model_total == 4 * one_matmul


def test_models_without_attention_have_no_recompute() -> None:
    counter = count_step(nn.Linear(8, 4), torch.randn(3, 8), _loss)
    assert counter.attention_recompute == 0 and counter.model_total == counter.total

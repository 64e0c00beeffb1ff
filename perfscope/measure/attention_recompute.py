"""The QKᵀ recompute inside attention backward: counted in hardware FLOPs (HFU), not in model FLOPs (MFU).

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils import flop_counter


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else tuple(x)


def qk_recompute_flops(query_shape: Any, key_shape: Any) -> int:
    """2·b·h_q·s_q·s_k·d_q for (b, h, s, d) shapes: the scores matmul the backward redoes (GQA: h_q heads)."""
    b, h_q, s_q, d_q = _shape(query_shape)
    s_k = _shape(key_shape)[2]
    return 2 * b * h_q * s_q * s_k * d_q


def _flash_or_efficient(unpack_name: str, seq_names: tuple[str, str, str, str]) -> Callable[..., int]:
    """(b, s, h, d) ops that may carry packed variable-length sequences: torch's own unpacking, per sequence."""

    def recompute(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        unpack = getattr(flop_counter, unpack_name)
        # Positional after (grad_out, q, k, v): flash: out, logsumexp, cum_q, cum_k, max_q, max_k;
        # efficient: bias, out, cu_q, cu_k, max_q, max_k — both leave the 4 sequence arguments at 2..5.
        seq = dict(zip(seq_names, args[2:6]))
        shapes: Iterator[Any] = unpack(query=query, key=key, value=value, grad_out=grad_out, **seq)
        return sum(qk_recompute_flops(q, k) for q, k, _v, _g in shapes)

    return recompute


def _shape_op(grad_out: Any, query: Any, key: Any, *args: Any, **kwargs: Any) -> int:
    return qk_recompute_flops(query, key)


def _recompute_formulas() -> dict[str, Callable[..., int]]:
    """Op name (as the flop registry's packets print) → recompute FLOPs from the op's raw arguments."""
    shape_ops = ["aten._scaled_dot_product_efficient_attention_backward", "aten._scaled_dot_product_flash_attention_backward",
                 "aten._scaled_dot_product_cudnn_attention_backward",
                 "aten._scaled_dot_product_flash_attention_for_cpu_backward"]
    formulas: dict[str, Callable[..., int]] = {name: _shape_op for name in shape_ops}
    formulas["aten._flash_attention_backward"] = _flash_or_efficient(
        "_unpack_flash_attention_nested_shapes", ("cum_seq_q", "cum_seq_k", "max_q", "max_k"))
    formulas["aten._efficient_attention_backward"] = _flash_or_efficient(
        "_unpack_efficient_attention_nested_shapes", ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"))
    return formulas


class RecomputeTally:
    """Wraps the attention-backward FLOP formulas so each call also adds its QKᵀ recompute to ``flops``."""

    def __init__(self) -> None:
        self.flops: float = 0.0

    def wrap(self, custom: dict[Any, Any]) -> dict[Any, Any]:
        """Raw-argument wrappers for every attention-backward op in torch's registry or in ``custom`` (whose
        plain formulas take shapes, as FlopCounterMode's custom_mapping does)."""
        formulas = _recompute_formulas()
        wrapped: dict[Any, Any] = {}
        for op, formula in {**flop_counter.flop_registry, **custom}.items():
            recompute = formulas.get(str(op))
            if recompute is None:
                continue
            counted = formula if op in flop_counter.flop_registry and op not in custom else (
                formula if getattr(formula, "_get_raw", False) else flop_counter.shape_wrapper(formula))
            wrapped[op] = self._wrapped(counted, recompute)
        return wrapped

    def _wrapped(self, counted: Callable[..., int], recompute: Callable[..., int]) -> Callable[..., int]:
        def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
            total = counted(*args, out_val=out_val, **kwargs)
            self.flops += recompute(*args, **kwargs)
            return total

        formula._get_raw = True  # type: ignore[attr-defined]
        return formula

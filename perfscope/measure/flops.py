"""Model FLOPs per step, counted with torch.utils.flop_counter, plus analytic formulas to check them.

Design notes: docs/measurement.md."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from perfscope.results.messages import Message, msg

FLOP_CONVENTION = (
    "torch.utils.flop_counter (matmul, conv, attention; 1 MAC = 2 FLOP; backward counted, no causal halving; "
    "elementwise/norm/optimizer FLOPs not counted); model FLOPs exclude activation-checkpoint recompute and "
    "fused attention backward's QK^T recompute (PaLM), HFU includes both"
)


def _gap_fillers() -> tuple[dict[Any, Any], dict[str, Message]]:
    """Formulas for ops torch's registry lacks, and the note each one earns when it was actually used
    (keyed by op name: a CUDA run counts flash/efficient attention with torch's own formulas, no note)."""
    aten = torch.ops.aten
    mapping: dict[Any, Any] = {}
    notes: dict[str, Message] = {}
    fwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if fwd is not None and fwd not in flop_counter.flop_registry:
        mapping[fwd] = lambda q, k, v, *_, **__: flop_counter.sdpa_flop_count(q, k, v)
        note = msg("cpu_sdpa_formula")
        notes[str(fwd)] = note
        if bwd is not None:
            mapping[bwd] = lambda g, q, k, v, *_, **__: flop_counter.sdpa_backward_flop_count(g, q, k, v)
            notes[str(bwd)] = note
    return mapping, notes


class StepFlopCounter:
    """Counts one training micro-step; `mark_forward()` between loss and backward splits fwd/bwd."""

    def __init__(self) -> None:
        mapping, self._fill_notes = _gap_fillers()
        self._recompute = RecomputeTally()
        self._mode = FlopCounterMode(display=False, custom_mapping={**mapping, **self._recompute.wrap(mapping)})
        self.forward: float = 0.0
        self.total: float = 0.0
        """Every FLOP the step ran (hardware FLOPs: attention backward's recompute included)."""
        self._used_fillers: set[str] = set()

    def running_total(self) -> float:
        return float(self._mode.get_total_flops())

    @property
    def attention_recompute(self) -> float:
        """FLOPs of fused attention backward's QKᵀ recompute in this count (RecomputeTally, below)."""
        return self._recompute.flops

    @property
    def model_total(self) -> float:
        """Model FLOPs (PaLM): ``total`` without attention backward's recompute."""
        return self.total - self._recompute.flops

    def mark_forward(self) -> None:
        self.forward = self.running_total()

    def __enter__(self) -> StepFlopCounter:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        self.total = self.running_total()
        counts = self._mode.get_flop_counts().get("Global", {})
        self._used_fillers = {str(op) for op, flops in counts.items() if flops and str(op) in self._fill_notes}

    @property
    def notes(self) -> list[Message]:
        notes = list(dict.fromkeys(self._fill_notes[op] for op in sorted(self._used_fillers)))
        if self._recompute.flops:
            notes.append(msg("attention_recompute_excluded", share=self._recompute.flops / self.total))
        if self.total == 0:
            notes.append(msg("no_matmul_counted"))
        return notes


FALLBACK_COUNT_MICRO_BATCH = 2
"""Micro-batch of the real count when fake tensors fail (2, not 1: BatchNorm rejects one value per channel)."""

LossFn = Callable[[nn.Module, Any], torch.Tensor]
Around = Callable[[StepFlopCounter], AbstractContextManager[Any]]


def _no_context(counter: StepFlopCounter) -> AbstractContextManager[Any]:
    return nullcontext()


def count_step(model: nn.Module, batch: Any, loss_fn: LossFn, *, around: Around = _no_context) -> StepFlopCounter:
    """One real forward + backward of loss_fn(model, batch) under a StepFlopCounter. ``around(counter)`` wraps the
    step (e.g. to measure the checkpointed blocks' forward). Leaves gradients on the model: zero them after."""
    return _counted(lambda: loss_fn(model, batch), around)


def _counted(loss_of: Callable[[], torch.Tensor], around: Around) -> StepFlopCounter:
    counter = StepFlopCounter()
    with counter, around(counter):
        loss = loss_of()
        counter.mark_forward()
        loss.backward()
    return counter


class _LossOf(nn.Module):
    """loss_fn(model, batch) as a module, so torch.func.functional_call can swap the model's tensors for fakes
    even though the user's loss function, not perfscope, calls the model."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, batch: Any) -> None:
        super().__init__()
        self.model, self.loss_fn, self.batch = model, loss_fn, batch

    def forward(self) -> torch.Tensor:
        return self.loss_fn(self.model, self.batch)


def count_step_on_fake_tensors(
    model: nn.Module,
    batch: Any,
    loss_fn: LossFn,
    *,
    around: Around = _no_context,
    prepare: Callable[[Any], Any] = lambda batch: batch,
) -> StepFlopCounter:
    """`count_step` on fake tensors: the model's parameters and buffers and the batch become FakeTensors, so the
    step allocates no device memory and runs no kernel, at any micro-batch. ``prepare`` runs on the fake batch
    inside the fake mode (e.g. the copy to the device, which then copies nothing). The model itself is not
    modified (functional_call swaps its tensors for the duration). Raises whatever fake tensors cannot do
    (an op without a fake kernel, a data-dependent shape): the caller falls back to a real count."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.func import functional_call
    from torch.utils._pytree import tree_map

    # allow_non_fake_inputs: real tensors kept as plain attributes (a causal mask, a constant) become fakes too.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = {f"model.{name}": mode.from_tensor(t) for name, t in (*model.named_parameters(), *model.named_buffers())}
    fake_batch = tree_map(lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x, batch)
    with mode:
        step = _LossOf(model, loss_fn, prepare(fake_batch))
        return _counted(lambda: functional_call(step, state, ()), around)


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


def _recompute_formulas() -> dict[str, Callable[..., int]]:
    """Op name (as the flop registry's packets print) → recompute FLOPs from the op's raw arguments."""
    shape_ops = ["aten._scaled_dot_product_efficient_attention_backward", "aten._scaled_dot_product_flash_attention_backward",
                 "aten._scaled_dot_product_cudnn_attention_backward",
                 "aten._scaled_dot_product_flash_attention_for_cpu_backward"]
    formulas: dict[str, Callable[..., int]] = dict.fromkeys(shape_ops, lambda _g, q, k, *_, **__: qk_recompute_flops(q, k))
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

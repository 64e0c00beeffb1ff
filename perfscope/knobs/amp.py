"""Automatic mixed precision: matmuls and convolutions in bf16/fp16 on tensor cores, the rest in fp32.

Design notes: docs/sweep.md."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import autocast_change, fp16_scaler_change

if TYPE_CHECKING:
    from perfscope.knobs.base import Observed


class _Autocast(Knob):
    """The two AMP knobs: autocast to ``value`` around the loss, judged by the matmuls the run made."""

    fields = ("precision",)
    shares_field = True
    addresses = ("gemm", "conv", "attention")
    torch_dtype: ClassVar[str]

    def loss_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        return autocast(config, self.torch_dtype)

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        return autocast_not_applied(config, seen)


class AmpBf16(_Autocast):
    id = "amp_bf16"
    title = "bf16 autocast (AMP)"
    reference = "https://pytorch.org/docs/stable/amp.html"
    value, torch_dtype = "bf16", "bfloat16"

    def code_change(self, ctx: KnobContext) -> str | None:
        return autocast_change(ctx.device, "bfloat16")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.precision != "fp32":
            return f"the loop already runs {ctx.base.precision} autocast"
        if ctx.cuda and (ctx.capability or (0, 0)) < (8, 0):
            return f"bf16 tensor cores need compute capability ≥ 8.0 (this device: {ctx.environment.compute_capability})"
        return None

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("numerics", change=msg("bf16_matmuls"))]

    def config_words(self, config: TrialConfig) -> str | None:
        # This knob names the precision field for both AMP knobs: "fp32", "bf16 autocast", "fp16 autocast".
        return config.precision if config.precision == "fp32" else f"{config.precision} autocast"


class AmpFp16(_Autocast):
    id = "amp_fp16"
    title = "fp16 autocast + GradScaler (AMP)"
    reference = "https://pytorch.org/docs/stable/amp.html#gradient-scaling"
    value, torch_dtype = "fp16", "float16"

    def code_change(self, ctx: KnobContext) -> str | None:
        return fp16_scaler_change(ctx.device) if ctx.cuda else None  # CPU runs are advised bf16

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.precision != "fp32":
            return f"the loop already runs {ctx.base.precision} autocast"
        if not ctx.cuda:
            return "fp16 autocast targets GPU tensor cores; on CPU use bf16"
        if (ctx.capability or (0, 0)) < (7, 0):
            return f"fp16 tensor cores need compute capability ≥ 7.0 (this device: {ctx.environment.compute_capability})"
        return None

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("numerics", change=msg("fp16_loss_scaling"))]

    def grad_scaler(self, config: TrialConfig) -> Any | None:
        import torch

        return torch.amp.GradScaler(config.device)


def autocast(config: TrialConfig, dtype: str) -> AbstractContextManager[Any]:
    import torch

    return torch.autocast(device_type=config.device, dtype=getattr(torch, dtype))


def autocast_not_applied(config: TrialConfig, seen: Observed) -> Message | None:
    """Autocast that changed no matmul: the fingerprint's matmul FLOPs by dtype have none in the autocast dtype."""
    dtype = config.precision  # named as the fingerprint names it
    flops = seen.matmul_flops_by_dtype
    if not flops or sum(flops.values()) <= 0 or flops.get(dtype):
        return None
    return msg("autocast_no_matmul", dtype=dtype, ran=sorted(d for d, v in flops.items() if v))

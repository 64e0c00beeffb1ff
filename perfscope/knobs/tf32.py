"""TF32 matmuls: fp32 tensors, tensor-core math with a 10-bit mantissa. Off by default for matmul since
PyTorch 1.12 (cuDNN convolutions keep it on, and perfscope leaves cuDNN alone); about 7× an A100's fp32 matmul
peak. Set through perfscope.tf32_api.set_matmul_tf32, with the setter perfscope.tf32_api picks for the torch (the legacy
`allow_tf32` while torch.compile still reads it, pytorch#166387): the run and the printed change agree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import tf32_change
from perfscope.tf32_api import matmul_tf32, set_matmul_tf32, tf32_api

if TYPE_CHECKING:
    from perfscope.knobs.base import Observed


class Tf32(Knob):
    id = "tf32"
    title = "TF32 matmuls"
    reference = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"
    fields = ("tf32",)
    value = True
    addresses = ("gemm",)

    def code_change(self, ctx: KnobContext) -> str | None:
        # The API of the torch that measured the run, the one its trial child applied.
        return tf32_change(tf32_api(ctx.environment.torch_version or None)) if ctx.cuda else None

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "TF32 is a tensor-core mode of NVIDIA GPUs (Ampere and later)"
        if (ctx.capability or (0, 0)) < (8, 0):
            return f"TF32 needs compute capability ≥ 8.0 (this device: {ctx.environment.compute_capability})"
        if ctx.base.tf32:
            return "TF32 is already on"
        if ctx.base.tf32 is None and ctx.model.matmul_tf32:
            return "TF32 is already on (set by the workload file)"
        if ctx.base.precision != "fp32":
            return f"the loop runs {ctx.base.precision} autocast: its matmuls are not fp32"
        return None

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("numerics", change=msg("tf32_matmuls"))]

    def before_steps(self, config: TrialConfig) -> None:
        # After the user's file and model factory ran: tf32=None (inactive) keeps, and the loop records, their setting.
        set_matmul_tf32(bool(config.tf32))

    def record(self, config: TrialConfig) -> Any:
        return matmul_tf32().enabled  # None: torch cannot tell

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        enabled = seen.recorded.get(self.id)
        if enabled is None or enabled == config.tf32:
            return None
        return msg("tf32_set_back", trial=bool(config.tf32), ran=bool(enabled))

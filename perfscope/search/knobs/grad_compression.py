"""Gradient communication compression: DDP communication hooks that all-reduce smaller gradients.

`bf16_compress_hook` / `fp16_compress_hook` halve the bytes each all-reduce moves (gradients cast down for the
wire, back up after); PowerSGD sends a low-rank approximation with error feedback. They pay only where the
exposed gradient communication is a real share of the step (many ranks, a slow interconnect) and they change
the numerics of the update. There is nothing to compress without data-parallel ranks: perfscope's trials run one
process today, so the knob says so on every run until distributed trials exist (issue 14), where it is measured
with the exposed communication time it saves and the numerics guard.
"""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext

NOT_DISTRIBUTED = ("gradient compression shrinks the all-reduce between data-parallel ranks; this run is one process "
                   "with no gradient communication (perfscope's distributed trials are not built yet)")


class GradCompression(Knob):
    id = "grad_compression"
    title = "gradient communication compression (DDP bf16 / fp16 / PowerSGD hooks)"
    reference = "https://pytorch.org/docs/stable/ddp_comm_hooks.html"

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("+from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                " model = DistributedDataParallel(model, ...)   # your existing wrapper\n"
                "+model.register_comm_hook(None, default_hooks.bf16_compress_hook)   # gradients cross the wire in bf16")

    def applies(self, ctx: KnobContext) -> str | None:
        return NOT_DISTRIBUTED

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return []  # unreachable while `applies` always declines: no single-process trial can apply a comm hook

    def changes_semantics(self, ctx: KnobContext, config: Any) -> list[str]:
        return ["numerics: gradients are all-reduced in lower precision (PowerSGD: a low-rank approximation)"]

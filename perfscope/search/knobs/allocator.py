"""CUDA caching allocator with expandable segments: fewer fragmented blocks, less reserved-but-unused memory,
fewer cudaMalloc retries near capacity."""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


class ExpandableSegments(Knob):
    id = "expandable_segments"
    title = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    reference = "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"

    def code_change(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return None
        return "+export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # before the process starts"

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "an option of the CUDA caching allocator"
        if "expandable_segments" in ctx.base.env.get(ALLOC_CONF, ""):
            return "expandable segments are already on"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"env": {ALLOC_CONF: "expandable_segments:True"}}]

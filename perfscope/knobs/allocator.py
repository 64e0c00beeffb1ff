"""CUDA caching allocator with expandable segments: fewer fragmented blocks, less reserved-but-unused memory,
fewer cudaMalloc retries near capacity.

Design notes: docs/sweep.md."""

from __future__ import annotations

import os
import re
from typing import Any

from perfscope.knobs.base import Knob, KnobContext

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def user_alloc_conf(ctx: KnobContext) -> str:
    """The allocator options the trials run with: the baseline config's env, else this process's environment
    (trial processes inherit it)."""
    return ctx.base.env.get(ALLOC_CONF, os.environ.get(ALLOC_CONF, "")).strip()


def alloc_options(conf: str) -> dict[str, str]:
    """'key:value,key:value' -> {key: value}; commas inside brackets (roundup_power2_divisions:[256:1,512:2]) stay."""
    options: dict[str, str] = {}
    for item in re.split(r",(?![^\[]*\])", conf):
        key, _, value = item.strip().partition(":")
        if key:
            options[key.strip()] = value.strip()
    return options


def with_expandable_segments(conf: str) -> str:
    return f"{conf},expandable_segments:True" if conf else "expandable_segments:True"


class ExpandableSegments(Knob):
    id = "expandable_segments"
    title = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    reference = "https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
    fields = ("env",)

    def code_change(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return None
        conf = user_alloc_conf(ctx)
        removed = f"-export {ALLOC_CONF}={conf}\n" if conf else ""
        return f"{removed}+export {ALLOC_CONF}={with_expandable_segments(conf)}   # before the process starts"

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "an option of the CUDA caching allocator"
        options = alloc_options(user_alloc_conf(ctx))
        if "expandable_segments" in options:
            return f"{ALLOC_CONF} already sets expandable_segments:{options['expandable_segments']} (the user's choice stands)"
        if options.get("backend") == "cudaMallocAsync":
            return f"{ALLOC_CONF} selects backend:cudaMallocAsync; expandable segments are an option of the native caching allocator"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"env": {ALLOC_CONF: with_expandable_segments(user_alloc_conf(ctx))}}]

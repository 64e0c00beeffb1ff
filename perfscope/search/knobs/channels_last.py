"""channels_last (NHWC) memory format: the layout tensor-core convolutions want; avoids transposes."""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext
from perfscope.snippets import channels_last_change


class ChannelsLast(Knob):
    id = "channels_last"
    title = "channels_last memory format"
    reference = "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"

    def code_change(self, ctx: KnobContext) -> str | None:
        return channels_last_change(ctx.device)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.channels_last:
            return "channels_last is already on"
        if not ctx.model.has_conv2d:
            return "no 2-D convolutions in the model: the memory format would not matter"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"channels_last": True}]

"""channels_last (NHWC) memory format: the layout tensor-core convolutions want; avoids transposes."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.snippets import channels_last_change
from perfscope.workload import Workload


class ChannelsLast(Knob):
    id = "channels_last"
    title = "channels_last memory format"
    reference = "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"
    fields = ("channels_last",)
    value = True
    addresses = ("conv",)
    observed_by_hooks = False

    def code_change(self, ctx: KnobContext) -> str | None:
        return channels_last_change(ctx.device)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.channels_last:
            return "channels_last is already on"
        if not ctx.model.has_conv2d:
            return "no 2-D convolutions in the model: the memory format would not matter"
        return None

    def config_words(self, config: TrialConfig) -> str | None:
        return "channels_last" if config.channels_last else None

    def apply_to_model(self, model: Any, config: TrialConfig, workload: Workload) -> Any:
        import torch

        return model.to(memory_format=torch.channels_last)

    def apply_to_batch(self, batch: Any, config: TrialConfig) -> Any:
        import torch

        from perfscope.knobs.apply.tensors import map_tensors

        def nhwc(t: torch.Tensor) -> torch.Tensor:
            return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 and t.is_floating_point() else t

        return map_tensors(batch, nhwc)

"""DDP `static_graph=True`: DDP learns the graph in the first step and stops re-checking it.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import DdpOption, KnobContext, ddp_reason
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.snippets import ddp_option_change


class DdpStaticGraph(DdpOption):
    id = "ddp_static_graph"
    title = "DDP static_graph=True"
    fields = ("static_graph",)
    value = True

    def code_change(self, ctx: KnobContext) -> str | None:
        return ddp_option_change(ctx.device, "only if the same parameters are used every step", static_graph=True)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.static_graph:
            return "static_graph is already on"
        return ddp_reason(ctx, "static_graph")

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("static_graph")] if config.static_graph else []

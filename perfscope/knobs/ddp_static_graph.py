"""DDP `static_graph=True`: DDP learns the graph in the first step and stops re-checking it.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import DdpOption, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg


class DdpStaticGraph(DdpOption):
    id = "ddp_static_graph"
    title = "DDP static_graph=True"
    fields = ("static_graph",)
    value = True
    why = "only if the same parameters are used every step"

    def changes_semantics(self, ctx: KnobContext, config: TrialConfig) -> list[Message]:
        return [msg("static_graph")] if config.static_graph else []

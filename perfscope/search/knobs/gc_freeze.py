"""Python GC pauses: a full collection walks every tracked object and lands in a random step.
`gc.freeze()` after start-up moves the long-lived objects out of the collector's reach."""

from __future__ import annotations

from typing import Any

from perfscope.search.knobs.base import Knob, KnobContext


class GcFreeze(Knob):
    id = "gc_freeze"
    title = "gc.freeze() after warm-up"
    reference = "https://docs.python.org/3/library/gc.html#gc.freeze"

    def code_change(self, ctx: KnobContext) -> str | None:
        return "+import gc\n+gc.collect(); gc.freeze()   # after model/optimizer/loader are built\n for step, batch in enumerate(loader):"

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.gc_mode != "default":
            return f"GC is already managed ({ctx.base.gc_mode})"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"gc_mode": "freeze"}]

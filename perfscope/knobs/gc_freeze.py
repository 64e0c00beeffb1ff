"""Python GC pauses: a full collection walks every tracked object and lands in a random step.
`gc.freeze()` after start-up moves the long-lived objects out of the collector's reach; TrialConfig.gc_mode
"disable" (a user's baseline) stops the collector during the steps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg

if TYPE_CHECKING:
    from perfscope.knobs.base import Observed


class GcFreeze(Knob):
    id = "gc_freeze"
    title = "gc.freeze() after warm-up"
    reference = "https://docs.python.org/3/library/gc.html#gc.freeze"
    fields = ("gc_mode",)
    value = "freeze"
    addresses = ("host", "launch")
    observed_by_hooks = False

    def code_change(self, ctx: KnobContext) -> str | None:
        return "+import gc\n+gc.collect(); gc.freeze()   # after model/optimizer/loader are built\n for step, batch in enumerate(loader):"

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.gc_mode != "default":
            return f"GC is already managed ({ctx.base.gc_mode})"
        return None

    def config_words(self, config: TrialConfig) -> str | None:
        return f"gc {config.gc_mode}" if config.gc_mode != "default" else None

    def window_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        return gc_mode(config.gc_mode)

    def record(self, config: TrialConfig) -> Any:
        import gc

        return {"enabled": gc.isenabled(), "frozen_objects": gc.get_freeze_count()}  # inside the GC mode's context

    def not_applied(self, config: TrialConfig, seen: Observed) -> Message | None:
        state = seen.recorded.get(self.id)
        if state is None:
            return None
        if config.gc_mode == "freeze" and state["frozen_objects"] == 0:
            return msg("gc_freeze_undone")
        if config.gc_mode == "disable" and state["enabled"]:
            return msg("gc_enabled_again")
        return None


@contextmanager
def gc_mode(mode: str) -> Iterator[None]:
    """'freeze' moves warm-up objects out of GC's reach, 'disable' stops the collector until the window ends."""
    import gc

    if mode == "disable":
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
    else:
        if mode == "freeze":
            gc.collect()
            gc.freeze()
        yield

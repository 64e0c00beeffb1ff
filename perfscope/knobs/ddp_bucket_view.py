"""DDP `gradient_as_bucket_view=True`: the gradients are views into DDP's all-reduce buckets.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import DdpOption, KnobContext, ddp_reason
from perfscope.snippets import ddp_option_change


class DdpBucketView(DdpOption):
    id = "ddp_bucket_view"
    title = "DDP gradient_as_bucket_view=True (no gradient copy into the buckets)"
    fields = ("gradient_as_bucket_view",)
    value = True

    def code_change(self, ctx: KnobContext) -> str | None:
        return ddp_option_change(ctx.device, "gradients live in the all-reduce buckets: one copy and one "
                                 "gradient-sized buffer fewer (do not detach_() or reassign .grad in place)",
                                 gradient_as_bucket_view=True)

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.gradient_as_bucket_view:
            return "gradient_as_bucket_view is already on"
        return ddp_reason(ctx, "gradient_as_bucket_view")

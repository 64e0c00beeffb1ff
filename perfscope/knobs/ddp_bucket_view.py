"""DDP `gradient_as_bucket_view=True`: the gradients are views into DDP's all-reduce buckets.

Design notes: docs/sweep.md."""

from __future__ import annotations

from perfscope.knobs.base import DdpOption


class DdpBucketView(DdpOption):
    id = "ddp_bucket_view"
    title = "DDP gradient_as_bucket_view=True (no gradient copy into the buckets)"
    fields = ("gradient_as_bucket_view",)
    value = True
    why = ("gradients live in the all-reduce buckets: one copy and one gradient-sized buffer fewer (do not detach_() "
           "or reassign .grad in place)")

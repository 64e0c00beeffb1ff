"""DDP gradient bucket size (`bucket_cap_mb`, torch's default 25 MB). Design notes: docs/sweep.md."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import DdpOption, KnobContext, ddp_reason
from perfscope.snippets import ddp_option_change

SIZES_MB = (5.0, 100.0)
TORCH_DEFAULT_MB = 25.0


class DdpBucketCap(DdpOption):
    id = "ddp_bucket_cap"
    title = "DDP gradient bucket size (bucket_cap_mb 5 / 100; default 25)"
    fields = ("bucket_cap_mb",)
    addresses = ("communication",)

    def code_change(self, ctx: KnobContext) -> str | None:
        return ddp_option_change(ctx.device, "the measured best of 5 and 100 (torch's default: 25): smaller buckets "
                                 "start all-reducing earlier in backward, larger ones make fewer calls", bucket_cap_mb="MB")

    def applies(self, ctx: KnobContext) -> str | None:
        return ddp_reason(ctx, "bucket_cap_mb")

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        current = ctx.base.bucket_cap_mb or TORCH_DEFAULT_MB
        return [{"bucket_cap_mb": size} for size in SIZES_MB if size != current]

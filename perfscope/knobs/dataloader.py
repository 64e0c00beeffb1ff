"""DataLoader: worker processes prepare batches in parallel with training; pinned memory makes the
host-to-device copy asynchronous (with non_blocking=True)."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext


class DataLoaderWorkers(Knob):
    id = "dataloader_workers"
    title = "DataLoader workers (num_workers, prefetch, persistent)"
    reference = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
    code_change = (
        "-loader = DataLoader(ds, batch_size=B)\n"
        "+loader = DataLoader(ds, batch_size=B, num_workers=N, persistent_workers=True, prefetch_factor=4)"
    )

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.workload.dataset is None:
            return "the workload yields ready batches (batches=), not a Dataset"
        if ctx.cores < 2:
            return "one CPU core: no room for worker processes"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        counts = sorted({max(1, ctx.cores // 2), min(ctx.cores, 8)} - {ctx.base.num_workers})
        variants: list[dict[str, Any]] = [{"num_workers": n, "persistent_workers": True} for n in counts]
        if counts:
            variants.append({"num_workers": counts[-1], "persistent_workers": True, "prefetch_factor": 4})
        return variants


class PinMemory(Knob):
    id = "pin_memory"
    title = "pinned host memory + non_blocking copies"
    reference = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
    code_change = (
        "-loader = DataLoader(ds, batch_size=B)\n"
        "+loader = DataLoader(ds, batch_size=B, pin_memory=True)\n"
        "-x = x.to(\"cuda\")\n"
        "+x = x.to(\"cuda\", non_blocking=True)"
    )

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "pinned memory speeds host-to-GPU copies; this run is on the CPU"
        if ctx.workload.dataset is None:
            return "the workload yields ready batches (batches=), not a Dataset"
        if ctx.base.pin_memory:
            return "pin_memory is already on"
        return None

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        return [{"pin_memory": True}]

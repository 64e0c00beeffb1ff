"""DataLoader: worker processes prepare batches in parallel with training; pinned memory makes the
host-to-device copy asynchronous (with non_blocking=True)."""

from __future__ import annotations

from typing import Any

from perfscope.knobs.base import Knob, KnobContext
from perfscope.results.config import TrialConfig
from perfscope.snippets import pin_memory_change


def _dataset_reason(ctx: KnobContext) -> str | None:
    if ctx.workload.dataset is None:
        return "the workload yields ready batches (batches=), not a Dataset"
    if ctx.cores_per_rank < 2:
        per_rank = f" per rank ({ctx.cores} for {ctx.base.nproc_per_node} ranks)" if ctx.base.nproc_per_node > 1 else ""
        return f"one CPU core{per_rank}: no room for worker processes"
    return None


class DataLoaderWorkers(Knob):
    id = "dataloader_workers"
    title = "DataLoader worker processes (num_workers)"
    reference = "https://pytorch.org/docs/stable/data.html#multi-process-data-loading"
    fields = ("num_workers",)
    addresses = ("data_wait",)

    def code_change(self, ctx: KnobContext) -> str | None:
        return "-loader = DataLoader(ds, batch_size=B)\n+loader = DataLoader(ds, batch_size=B, num_workers=N)"

    def applies(self, ctx: KnobContext) -> str | None:
        return _dataset_reason(ctx)

    def variants(self, ctx: KnobContext) -> list[dict[str, Any]]:
        # Half and all the cores (at most 8): the trial process itself needs a core, and past 8 workers
        # the gain is rarely worth the host memory each worker's copy of the dataset costs. In a distributed run
        # every local rank starts its own workers: the cores are the rank's share of the machine.
        cores = ctx.cores_per_rank
        counts = sorted({max(1, cores // 2), min(cores, 8)} - {ctx.base.num_workers})
        return [{"num_workers": n} for n in counts]

    def config_words(self, config: TrialConfig) -> str | None:
        # Names pin_memory too: "2 DataLoader workers, pinned".
        n = config.num_workers
        return f"{n} DataLoader worker{'s' if n != 1 else ''}" + (", pinned" if config.pin_memory else "")

    def apply_to_loader(self, config: TrialConfig) -> dict[str, Any]:
        return {"num_workers": config.num_workers}


class _WorkerOption(Knob):
    """An option that only exists with worker processes: measured on top of dataloader_workers' best count
    when the user's loop has none."""

    builds_on = "dataloader_workers"
    reference = "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader"
    addresses = ("data_wait",)

    def prerequisite_met(self, config: TrialConfig) -> bool:
        return config.num_workers > 0

    def apply_to_loader(self, config: TrialConfig) -> dict[str, Any]:
        return {self.fields[0]: getattr(config, self.fields[0])}


class PersistentWorkers(_WorkerOption):
    id = "persistent_workers"
    title = "persistent DataLoader workers"
    fields = ("persistent_workers",)
    value = True

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("-loader = DataLoader(ds, batch_size=B, num_workers=N)\n"
                "+loader = DataLoader(ds, batch_size=B, num_workers=N, persistent_workers=True)   # no worker restart per epoch")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.persistent_workers:
            return "persistent_workers is already on"
        return _dataset_reason(ctx)


class PrefetchFactor(_WorkerOption):
    id = "prefetch_factor"
    title = "deeper DataLoader prefetch (prefetch_factor=4)"
    fields = ("prefetch_factor",)
    value = 4

    def code_change(self, ctx: KnobContext) -> str | None:
        return ("-loader = DataLoader(ds, batch_size=B, num_workers=N)\n"
                "+loader = DataLoader(ds, batch_size=B, num_workers=N, prefetch_factor=4)   # torch's default is 2")

    def applies(self, ctx: KnobContext) -> str | None:
        if ctx.base.prefetch_factor is not None and ctx.base.prefetch_factor >= 4:
            return f"prefetch_factor is already {ctx.base.prefetch_factor}"
        return _dataset_reason(ctx)


class PinMemory(Knob):
    id = "pin_memory"
    title = "pinned host memory + non_blocking copies"
    reference = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
    fields = ("pin_memory",)
    value = True
    addresses = ("memcpy", "sync")

    def code_change(self, ctx: KnobContext) -> str | None:
        return pin_memory_change(ctx.device) if ctx.cuda else None  # pinning only speeds copies to a GPU

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "pinned memory speeds host-to-GPU copies; this run is on the CPU"
        if ctx.workload.dataset is None:
            return "the workload yields ready batches (batches=), not a Dataset"
        if ctx.base.pin_memory:
            return "pin_memory is already on"
        return None

    def apply_to_loader(self, config: TrialConfig) -> dict[str, Any]:
        return {"pin_memory": config.device == "cuda"}  # pinning only speeds copies to a GPU

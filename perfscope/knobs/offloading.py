"""Activation offloading: saved activations wait in pinned host memory between forward and backward.

Design notes: docs/sweep.md."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from perfscope.knobs.base import Knob, KnobContext, size
from perfscope.results import Trial
from perfscope.results.config import TrialConfig
from perfscope.wording import reason


class ActivationOffloading(Knob):
    id = "activation_offloading"
    title = "activation offloading to pinned host memory"
    reference = "https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.save_on_cpu"
    fields = ("offload_activations",)
    value = True
    observed_by_hooks = False
    frees = "activations"
    cost = "host↔device copies"
    traced = True

    def code_change(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return None
        return ("-    loss = loss_fn(model, batch)\n"
                "+    with torch.autograd.graph.save_on_cpu(pin_memory=True):   # saved activations wait in host memory\n"
                "+        loss = loss_fn(model, batch)\n"
                "     loss.backward()")

    def applies(self, ctx: KnobContext) -> str | None:
        if not ctx.cuda:
            return "offloading moves activations from GPU memory to host memory; on the CPU they are in host memory already"
        if ctx.base.offload_activations:
            return "activation offloading is already on"
        return None

    def step_context(self, config: TrialConfig) -> AbstractContextManager[Any] | None:
        # The pack hook copies each saved tensor out as the forward saves it; backward copies it back.
        import torch

        return torch.autograd.graph.save_on_cpu(pin_memory=True)

    def measured_notes(self, ctx: KnobContext, baseline: Trial, trial: Trial) -> list[str]:
        facts = trial.metrics.trace_facts if trial.metrics is not None else None
        copies = facts.host_transfers if facts is not None else None
        if copies is None:
            why = reason(trial.metrics.unavailable, "trace") if trial.metrics is not None else None
            return [f"host↔device copy traffic unknown: {why or 'no trace of this run'}"]
        base_facts = baseline.metrics.trace_facts if baseline.metrics is not None else None
        base = base_facts.host_transfers if base_facts is not None else None
        total = copies.h2d_bytes + copies.d2h_bytes
        if base is not None:
            added = total - base.h2d_bytes - base.d2h_bytes
            traffic = f"adds {size(added)} of host↔device copies per step ({size(total)} in all"
        else:
            traffic = f"{size(total)} of host↔device copies per step (the baseline's trace is missing: not net of its own"
        traffic += f"; device→host {size(copies.d2h_bytes)}, host→device {size(copies.h2d_bytes)})"
        notes = [traffic]
        if copies.overlapped_fraction is not None:
            notes.append(f"{copies.overlapped_fraction:.0%} of the copy time overlapped kernels "
                         f"({copies.time_s * 1e3:.1f} ms of copies per step, from the trace)")
        return notes

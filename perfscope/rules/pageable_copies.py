from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import pin_memory_change


class PageableCopies(Rule):
    """Host-to-device copies from pageable memory: pin the batches and copy with non_blocking=True.

    Anti-pattern: `x.to("cuda")` from ordinary (pageable) host memory is staged through a driver buffer and
    blocks the host. Best practice: `DataLoader(pin_memory=True)` and `x.to("cuda", non_blocking=True)`, so
    the copy overlaps with compute.
    """

    id = "PS202"
    name = "pageable-copies"
    doc = RuleDoc(
        detects="H2D copies from pageable memory",
        threshold="any in the trace",
        evidence="memcpy count, bytes, time",
        fix="`pin_memory=True` + `non_blocking=True`",
        gain="measured (`pin_memory`)",
        guard="GPU only; silent when the loader pins",
    )
    groups = ("input",)
    addresses = ("memcpy", "sync")
    knobs = ("pin_memory",)

    def check(self, ctx: RuleContext) -> list[Finding]:
        copies = ctx.facts.pageable_memcpy if ctx.facts else None
        if not ctx.cuda or ctx.config("pin_memory") or copies is None or not copies.count:
            return []
        finding = Finding(
            rule_id=self.id, title="Pageable host-to-device copies: use pin_memory + non_blocking", severity="low",
            evidence=[f"{copies.count:.0f} pageable HtoD copies per step ({copies.bytes / 2**20:.1f} MiB, "
                      f"{copies.time_s * 1e3:.2f} ms)"],
            fix=pin_memory_change(ctx.device),
            reference="https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        )
        return [self.measured(ctx, finding, "pin_memory")]

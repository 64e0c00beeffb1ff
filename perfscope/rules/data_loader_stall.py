from __future__ import annotations

from dataclasses import dataclass

from perfscope.results import Finding
from perfscope.rules._text import ms, pct
from perfscope.rules.engine import Rule, RuleContext


@dataclass
class DataLoaderStall(Rule):
    """The step waits for data: load batches in DataLoader workers.

    Anti-pattern: decoding and augmenting samples in the training process (num_workers=0), so the device
    idles while the next batch is built. Best practice: `num_workers` > 0 with `persistent_workers=True`
    and a `prefetch_factor` that covers the slowest batch; move heavy transforms off the critical path.
    """

    id = "PS201"
    name = "data-loader-stall"
    groups = ("input",)
    knobs = ("dataloader_workers",)
    threshold: float = 0.10
    """Fire when at least this share of each step is spent blocked on the data iterator."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        # The timed steps' own measure first; the trace's (profiled, slower steps) when the loop could not time it.
        wait = ctx.metrics.data_wait_share or (ctx.facts.data_wait_fraction if ctx.facts else 0.0)
        if wait < self.threshold:
            return []
        median = ctx.metrics.typical_step.median if ctx.metrics.typical_step else ctx.metrics.mean_step_time_s
        finding = Finding(
            rule_id=self.id, title="The step waits for data: add DataLoader workers", severity="high" if wait >= 0.3 else "medium",
            evidence=[f"{pct(wait)} of each step is spent blocked on the data iterator (median step {ms(median)})",
                      f"num_workers={ctx.config('num_workers', 0)}"],
            fix="-loader = DataLoader(ds, batch_size=B)\n+loader = DataLoader(ds, batch_size=B, num_workers=N, persistent_workers=True, prefetch_factor=4)",
            estimated_gain=1.0 / (1.0 - wait),
            estimate_method="upper bound if data loading were fully overlapped: 1 / (1 − data-wait share)",
            reference="https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
        )
        return [self.measured(ctx, finding, "dataloader_workers")]

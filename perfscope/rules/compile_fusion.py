from __future__ import annotations

import re

from perfscope.results import Finding, KernelStat, KnobOutcome
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import compile_change

FUSIBLE = ("elementwise", "normalization")
"""The trace categories torch.compile fuses (the rule's `addresses`)."""
INDUCTOR_FUSED = re.compile(r"^triton_(?:poi|per|red)_|cpp_fused_")
"""Kernels torch.compile (inductor) generated: pointwise, persistent-reduction and reduction Triton kernels on a
GPU, `cpp_fused_*` on a CPU. Their names hold "add"/"mul"/"layer_norm", so the trace categories count them as
elementwise or normalization work."""


def inductor_fused_time(kernels: list[KernelStat]) -> float:
    """Seconds per step in inductor's fused elementwise/normalization kernels among the trace's top kernels."""
    return sum(k.time_s for k in kernels if k.category in FUSIBLE and INDUCTOR_FUSED.search(k.name))


class CompileFusion(Rule):
    """Much of the step is unfused elementwise/normalization work: try torch.compile.

    Anti-pattern: each elementwise op reads and writes the whole tensor from memory; chains of them are
    memory-bound. Best practice: `torch.compile(model)` fuses them (1.41× geomean training speed-up over
    180+ models on an A100, PyTorch 2 paper); compile time is a one-off cost, reported apart.
    """

    id = "PS303"
    name = "compile-fusion"
    doc = RuleDoc(
        detects="unfused elementwise/normalization work",
        threshold="≥ 25 % of kernel time, or compile measured",
        evidence="category times, compile time",
        fix="`torch.compile(model)`",
        gain="measured (`compile`)",
        guard='silent when compiled; measured no better → "did not help here"',
    )
    groups = ("compute",)
    knobs = ("compile",)
    addresses = FUSIBLE
    threshold: float = 0.25
    """Fire when elementwise + normalization kernels take at least this share of kernel time."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        unobserved = "compile" in ctx.baseline.unknown_settings
        if not unobserved and ctx.config("compile") is not None:
            return []
        times = ctx.facts.kernels.time_by_category if ctx.facts else {}
        fused = inductor_fused_time(ctx.facts.kernels.top) if ctx.facts else 0.0
        if unobserved and (not times or fused):
            return []  # compile not observed: only a trace without inductor's kernels says the loop runs eager
        total = sum(times.values())
        # Inductor's generated kernels are already fused work: never the unfused elementwise work compile would fuse.
        unfused = max(sum(times.get(c, 0.0) for c in FUSIBLE) - fused, 0.0)
        share = unfused / total if total else 0.0
        outcome = ctx.measured("compile")
        if share < self.threshold and not outcome:
            return []
        evidence = [f"elementwise and normalization take {pct(share)} of kernel time"] if total else []
        if unobserved:
            evidence.append("whether the loop uses torch.compile was not observed; its trace shows no inductor kernels")
        if outcome and outcome.trial:
            trial = ctx.results.trial(outcome.trial)
            if trial and trial.metrics and trial.metrics.compile_time_s is not None:
                evidence.append(f"compilation took {trial.metrics.compile_time_s:.1f} s once (not in the step time)")
        finding = Finding(
            rule_id=self.id, title="Fuse elementwise work with torch.compile", severity="medium", evidence=evidence or ["torch.compile was measured"],
            fix=compile_change(ctx.device),
            reference="https://pytorch.org/docs/stable/generated/torch.compile.html",
        )
        return [self.measured(ctx, finding, "compile")]

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        if not ctx.cuda:
            return ("on a CPU the fused C++ kernels save memory traffic that matters less than on a GPU, and small "
                    "models rarely gain; torch.compile's reported 1.41× geomean is for GPU training")
        return "fusion saves at most the elementwise share of the step; graph breaks or recompiles can eat that"

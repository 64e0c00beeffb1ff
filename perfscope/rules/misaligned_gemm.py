from __future__ import annotations

from perfscope.results import Finding, GemmAlignment, GemmShape, msg
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc


class MisalignedGemm(Rule):
    """Hot matmuls with dimensions that are not multiples of 8 (16-bit) / 64: pad them.

    Anti-pattern: a vocabulary of 50257 or a hidden size of 5461 forces tensor cores onto slow edge tiles
    (vocab 50257 → 50304 made a GPT-2 bf16 step 1.47× faster on an H100 80GB HBM3, measured by this
    project: torch 2.11, GPT-2 124M, seq 1024, batch 8). Best practice: round model dimensions
    up to a multiple of 64 (pad the embedding/vocabulary; mask or ignore the padded logits).
    """

    id = "PS401"
    name = "misaligned-gemm"
    doc = RuleDoc(
        detects="GEMM dims not multiples of 8/64",
        threshold="≥ 5 % of the step",
        evidence="GEMM shapes, micro-benchmark of padded shape",
        fix="pad the dimension",
        gain="estimated: each benchmarked shape's time × its padded/unpadded wall-time ratio, over the step (Amdahl); "
             "bound: the misaligned matmuls' share of the step (at most 1 / (1 − share))",
        guard="only shapes measured slower when misaligned; padding measured no faster → no estimate",
    )
    groups = ("compute",)
    addresses = ("gemm",)
    min_share: float = 0.05
    """Fire when the misaligned matmuls take at least this share of the step."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        if ctx.facts is None:
            return []
        shapes = [g for g in ctx.facts.gemm_shapes if g.misaligned]
        step = ctx.facts.step_time_s or ctx.metrics.mean_step_time_s
        share = sum(g.time_s for g in shapes) / step if step else 0.0
        if not shapes or share < self.min_share:
            return []
        top = shapes[0]
        source = "device time of their kernels" if top.time_source == "kernels" else "CPU time"
        evidence = [f"{len(shapes)} matmul shapes with misaligned dims take {pct(share)} of the step ({source}); hottest "
                    f"{top.op} m×k×n = {'×'.join(map(str, top.shape))} (misaligned: {', '.join(top.misaligned)})"]
        finding = Finding(
            rule_id=self.id, title="GEMM shapes not multiples of 64: pad the dimension", severity="medium", evidence=evidence,
            fix="-vocab_size = 50257\n+vocab_size = 50304   # next multiple of 64; mask the padded logits",
            caveats=[msg("padded_vocabulary")],
            reference="https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html",
        )
        dtype, whose = self.advice_dtype(ctx)
        measured = [r for r in ctx.facts.gemm_alignment if r.speedup_per_flop]
        rows = [r for r in measured if r.dtype == dtype]  # padding pays differently in fp32 and on 16-bit tiles
        if measured and not rows:
            finding.evidence.append(f"no alignment micro-benchmark in {dtype} ({whose}): only in "
                                    f"{', '.join(sorted({r.dtype for r in measured}))}, so no gain is estimated")
        if rows:
            best = max(rows, key=lambda r: r.speedup_per_flop)
            finding.evidence.append(
                f"micro-benchmark on this device in {dtype} ({whose}): {'×'.join(map(str, best.shape))} takes "
                f"{best.time_s * 1e6:.0f} µs, padded {'×'.join(map(str, best.padded))} {best.padded_time_s * 1e6:.0f} µs "
                f"({best.speedup_per_flop:.2f}× per FLOP)"
            )
            saved = self.saved_s(shapes, rows)
            if saved <= 0:
                finding.evidence.append("padded, the benchmarked shapes took no less time per step on this device: "
                                        "no gain is estimated")
            if saved > 0 and step:
                finding.estimated_gain = step / (step - min(saved, step * share))
                finding.estimate_method = ("GEMM alignment micro-benchmark on this device: each benchmarked shape's time per step scaled "
                                           "by its padded/unpadded wall-time ratio (Amdahl over the step); shapes not benchmarked "
                                           "assumed unchanged")
                finding.estimate_bound = (f"the misaligned matmuls take {pct(share)} of the step: even at no time at all the step "
                                          f"would gain at most {1 / (1 - share):.2f}×" if share < 1 else
                                          "the misaligned matmuls are the whole step")
        return [finding]

    @staticmethod
    def advice_dtype(ctx: RuleContext) -> tuple[str, str]:
        """The dtype the padded matmuls will run in: the recommended configuration's precision (bf16 when the
        recommendation stacks amp_bf16 onto an fp32 loop), else the loop's own; and whose precision that is."""
        sweep = ctx.results.sweep
        recommended = ctx.results.trial(sweep.recommended_trial) if sweep and sweep.recommended_trial else None
        if recommended is not None and recommended.name != ctx.baseline.name:
            return recommended.config.precision, "the precision the recommended configuration runs in"
        return ctx.config("precision", "fp32"), "the loop's own precision"

    @staticmethod
    def saved_s(shapes: list[GemmShape], rows: list[GemmAlignment]) -> float:
        """Seconds per step the padded shapes save, from each shape's measured wall times (padding adds FLOPs: the
        padded op's own time is what it costs, not its time per FLOP)."""
        by_shape = {tuple(r.shape): r for r in rows if r.time_s > 0}
        saved = 0.0
        for g in shapes:
            r = by_shape.get(tuple(g.shape))
            if r is not None and r.padded_time_s < r.time_s:
                saved += g.time_s * (1.0 - r.padded_time_s / r.time_s)
        return saved

from __future__ import annotations

from perfscope.results import Finding, KnobOutcome
from perfscope.rules._precision import matmul_precision
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import autocast_change


class MixedPrecision(Rule):
    """Matmuls run in fp32: use bf16 autocast (or fp16 + GradScaler).

    Anti-pattern: training in fp32 on a GPU with tensor cores leaves most of its matmul throughput unused
    (an H100's dense bf16 peak is ~15× its fp32 peak). Best practice: `torch.autocast(dtype=torch.bfloat16)`
    around the forward pass and loss; fp16 needs a GradScaler. Numerics change: compare the loss curve.
    """

    id = "PS101"
    name = "mixed-precision"
    doc = RuleDoc(
        detects="fp32 matmuls",
        threshold="loop in fp32 (GPU), or amp measured (CPU)",
        evidence="config precision, fp32 GEMM share (trace), datasheet bf16/fp32 peaks",
        fix="bf16 autocast (fp16 + GradScaler) for the run's device",
        gain="measured (`amp_bf16`, `amp_fp16`)",
        guard='silent when autocast is on; on a CPU only when measured; measured slower → "did not help here" with why',
    )
    groups = ("compute",)
    knobs = ("amp_bf16", "amp_fp16")
    addresses = ("gemm", "conv", "attention")

    def check(self, ctx: RuleContext) -> list[Finding]:
        precision = matmul_precision(ctx)  # not observed (a hooks loop) is not fp32: no finding rests on a default
        if not precision.fp32:
            return []
        measured = [ctx.knob(k) for k in self.knobs]
        measured = [o for o in measured if o is not None and o.status == "measured" and o.gain is not None]
        fp32_share = ctx.facts.kernels.fp32_gemm_fraction if ctx.facts else None
        if not ctx.cuda and not measured:
            return []
        evidence = [precision.evidence]
        if fp32_share is not None:
            evidence.append(f"{pct(fp32_share)} of GEMM kernel time is in fp32 (non-tensor-core) kernels")
        peaks = ctx.results.environment.datasheet_peaks_tflops
        if peaks.get("bf16") and peaks.get("fp32"):
            evidence.append(f"this device's dense bf16 peak is {peaks['bf16'] / peaks['fp32']:.0f}× its fp32 peak")
        best = max(measured, key=lambda o: o.gain.ratio, default=None)  # type: ignore[union-attr]
        knob = best.knob if best else "amp_bf16"
        finding = Finding(
            rule_id=self.id, title="Matmuls run in fp32: use bf16 autocast" if knob == "amp_bf16" else "Matmuls run in fp32: use fp16 autocast + GradScaler",
            severity="high" if ctx.cuda else "medium", evidence=evidence,
            fix=best.code_change if best and best.code_change else autocast_change(ctx.device, "bfloat16"),
            caveats=["numerics: reduced-precision matmuls; compare the loss curve over a few hundred steps"],
            reference="https://pytorch.org/docs/stable/amp.html",
        )
        return [self.measured(ctx, finding, knob)]

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        if not ctx.cuda:
            return ("bf16 autocast on a CPU without bf16 matrix units (AMX, AVX-512 BF16) is slower than fp32: the casts "
                    "cost more than the matmuls save; on a GPU with tensor cores it is typically 2–3× faster")
        return ("reduced precision speeds up the matmuls only; on this run they are too small a share of the step "
                "(or too small to fill the tensor cores) for it to show")

from __future__ import annotations

from perfscope.results import Finding, KnobOutcome, msg
from perfscope.rules._precision import bf16_capable, fp32_matmuls
from perfscope.rules._text import pct
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import autocast_change, fp16_scaler_change


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
        fix="bf16 autocast on GPUs with bf16 tensor cores (compute capability ≥ 8.0) and CPUs; fp16 autocast + GradScaler "
            "below 8.0; says what it cannot know when the capability is unknown",
        gain="measured (`amp_bf16`, `amp_fp16`)",
        guard='silent when autocast is on; on a CPU only when measured, a slowdown explained by the measured bf16/fp32 '
              'matmul ceilings; measured slower → "did not help here" with why',
    )
    groups = ("compute",)
    knobs = ("amp_bf16", "amp_fp16")
    addresses = ("gemm", "conv", "attention")

    def check(self, ctx: RuleContext) -> list[Finding]:
        why = fp32_matmuls(ctx)  # not observed (a hooks loop) is not fp32: no finding rests on a default
        if why is None:
            return []
        measured = [o for k in self.knobs if (o := ctx.measured(k))]
        fp32_share = ctx.facts.kernels.fp32_gemm_fraction if ctx.facts else None
        if not ctx.cuda and not measured:
            return []
        evidence = [why]
        if fp32_share is not None:
            evidence.append(f"{pct(fp32_share)} of GEMM kernel time is in fp32 (non-tensor-core) kernels")
        env = ctx.results.environment
        bf16 = bf16_capable(env.compute_capability) if ctx.cuda else True
        best = max(measured, key=lambda o: o.gain.ratio, default=None)  # type: ignore[union-attr]
        if best is not None and best.knob == "amp_bf16" and bf16 is False:
            best = None  # a device without bf16 is never told to use it, whatever a run recorded
        knob = best.knob if best else "amp_bf16" if bf16 else "amp_fp16"
        dtype = "bf16" if knob == "amp_bf16" else "fp16"
        peaks = env.datasheet_peaks_tflops
        if peaks.get(dtype) and peaks.get("fp32"):
            evidence.append(f"this device's dense {dtype} peak is {peaks[dtype] / peaks['fp32']:.0f}× its fp32 peak")
        if bf16 is False:
            evidence.append(f"compute capability {env.compute_capability}: no bf16 tensor cores (they need 8.0, Ampere, "
                            "and later): fp16 autocast with a GradScaler")
        elif bf16 is None and ctx.cuda:
            evidence.append("the device's compute capability is unknown: bf16 needs 8.0 (Ampere) or later; before it, use "
                            "fp16 autocast with a GradScaler")
        finding = Finding(
            rule_id=self.id, title="Matmuls run in fp32: use bf16 autocast" if knob == "amp_bf16" else "Matmuls run in fp32: use fp16 autocast + GradScaler",
            severity="high" if ctx.cuda else "medium", evidence=evidence,
            fix=best.code_change if best and best.code_change else (
                autocast_change(ctx.device, "bfloat16") if knob == "amp_bf16" else fp16_scaler_change(ctx.device)),
            caveats=[msg("numerics", change=msg("reduced_precision_matmuls"))],
            reference="https://pytorch.org/docs/stable/amp.html",
        )
        return [self.measured(ctx, finding, knob)]

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        if not ctx.cuda:
            ceiling = ctx.results.environment.measured_ceiling_tflops
            if ceiling.get("bf16") and ceiling.get("fp32"):  # what this CPU's matmuls measured, not a guess at its ISA
                ratio = ceiling["bf16"] / ceiling["fp32"]
                return (f"this CPU's measured bf16 matmul ceiling is {ceiling['bf16']:.3g} TFLOP/s against fp32's "
                        f"{ceiling['fp32']:.3g} ({ratio:.2f}×): " + (
                            "its matmuls gain from bf16, but the casts around them and the step's other ops cost more here"
                            if ratio > 1 else "bf16 matmuls are no faster on it, and the casts cost time on top")
                        + "; on a GPU with bf16 tensor cores it is typically 2–3× faster")
            return ("bf16 autocast on this CPU was measured slower than fp32: the casts cost more than the matmuls save "
                    "(a CPU's bf16 matmul speed depends on its matrix units; its ceiling was not measured here); on a GPU "
                    "with bf16 tensor cores it is typically 2–3× faster")
        return ("reduced precision speeds up the matmuls only; on this run they are too small a share of the step "
                "(or too small to fill the tensor cores) for it to show")

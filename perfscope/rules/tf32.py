from __future__ import annotations

from perfscope.results import Finding, msg
from perfscope.rules._precision import fp32_matmuls
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import tf32_change
from perfscope.tf32_api import tf32_api
from perfscope.wording import reason


class Tf32Matmul(Rule):
    """fp32 matmuls without TF32 on an Ampere-or-later GPU.

    Anti-pattern: PyTorch keeps TF32 off for matmuls since 1.12, so an fp32 loop runs on the slow fp32 path
    (an A100's TF32 matmul peak is ~8× fp32). Best practice, when a 10-bit mantissa in matmuls is acceptable:
    `torch.backends.cuda.matmul.allow_tf32 = True`, which on torch ≥ 2.9 also sets `fp32_precision = "tf32"`;
    the new setter alone makes torch's legacy reads raise, and torch.compile still makes them (pytorch#166387).
    perfscope.tf32_api decides per torch. cuDNN convolutions use TF32 by default.
    """

    id = "PS102"
    name = "tf32"
    doc = RuleDoc(
        detects="fp32 matmuls without TF32",
        threshold="Ampere or later GPU",
        evidence="compute capability, the trial's TF32 setting",
        fix="the run's torch API for TF32",
        gain="measured (`tf32`)",
        guard="silent when the user's file set TF32, on CPUs and pre-Ampere GPUs",
    )
    groups = ("compute",)
    addresses = ("gemm",)
    knobs = ("tf32",)

    def check(self, ctx: RuleContext) -> list[Finding]:
        cc = ctx.results.environment.compute_capability
        # The config's explicit setting, else what the baseline recorded of the user's own (config tf32=None).
        configured = ctx.config("tf32")
        tf32_on = configured if configured is not None else ctx.metrics.matmul_tf32
        # TF32 concerns fp32 matmuls only: none when they run in bf16/fp16, or the precision was not observed.
        if not ctx.cuda or tf32_on or fp32_matmuls(ctx) is None or not cc or float(cc) < 8.0:
            return []
        finding = Finding(
            rule_id=self.id, title="fp32 matmuls without TF32", severity="medium",
            evidence=[f"compute capability {cc} supports TF32; " + (
                "the loop leaves it off" if tf32_on is False else
                f"the loop's TF32 setting could not be read ({reason(ctx.metrics.unavailable, 'matmul_tf32', 'unknown')})")],
            # In the API of the torch that measured the run (perfscope.tf32_api: the one its trials applied).
            fix=tf32_change(tf32_api(ctx.results.environment.torch_version or None)),
            caveats=[msg("numerics", change=msg("tf32_matmuls"))],
            reference="https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
        )
        return [self.measured(ctx, finding, "tf32")]

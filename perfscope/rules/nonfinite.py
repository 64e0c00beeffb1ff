from __future__ import annotations

from perfscope.results import Finding
from perfscope.rules._precision import bf16_capable
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.snippets import fp16_scaler_change, fp16_to_bf16_change
from perfscope.wording import joined


class NonFiniteLoss(Rule):
    """A configuration produced inf/NaN losses or trained differently (fp16 overflow, broken compile).

    Anti-pattern: fp16 without loss scaling overflows; a GradScaler with a growth interval too short keeps
    skipping steps. Best practice: bf16 autocast (fp32's exponent range, no scaler) on devices that support
    it, or GradScaler with default settings; keep a configuration that changes the loss out of production.
    """

    id = "PS601"
    name = "non-finite-loss"
    doc = RuleDoc(
        detects="a configuration produced inf/NaN or diverged",
        threshold="any rejected/nonfinite run (not an optimizer swap: PS503 reports those)",
        evidence="the numerics guard's verdict",
        fix="fix the precision / compile: bf16 where the device has it, else fp16 + GradScaler",
        gain="—",
        guard="only for rejected runs",
    )
    groups = ("numerics",)

    def check(self, ctx: RuleContext) -> list[Finding]:
        bad_trials = [t for t in ctx.results.trials if t.status == "nonfinite"]
        rejected = [o for o in (ctx.results.sweep.knobs if ctx.results.sweep else [])
                    if o.status == "rejected" and not _swaps_optimizer(ctx, o.trial)]  # PS503 reports those
        if not bad_trials and not rejected:
            return []
        evidence = [f"trial {t.name}: {(t.error or 'non-finite loss').splitlines()[0]}" for t in bad_trials]
        evidence += [f"{o.knob}: {joined(o.reason)}" for o in rejected]
        return [Finding(
            rule_id=self.id, title="Non-finite or diverging loss in some configurations", severity="high" if ctx.baseline.status == "nonfinite" else "medium",
            evidence=evidence,
            # bf16 only where the device has it (compute capability 8.0+); before Ampere, fp16 with a default GradScaler.
            fix=fp16_scaler_change(ctx.device) if ctx.cuda and bf16_capable(ctx.results.environment.compute_capability) is False
            else fp16_to_bf16_change(ctx.device),
            reference="https://pytorch.org/docs/stable/amp.html#gradient-scaling",
        )]


def _swaps_optimizer(ctx: RuleContext, configuration: str | None) -> bool:
    """A lean-optimizer knob's rejection: the loss moved because the optimizer changed, not through overflow."""
    trial = ctx.results.trial(configuration) if configuration else None
    return trial is not None and trial.config.optimizer != "user"

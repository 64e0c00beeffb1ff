from __future__ import annotations

from perfscope import knobs
from perfscope.results import Finding
from perfscope.rules.engine import Rule, RuleContext, RuleDoc
from perfscope.stats import confidence_text


class MeasuredKnob(Rule):
    """A knob the sweep measured that no diagnosis explains: report its measured effect as it is.

    Every measured knob appears exactly once in the findings — with the rule that explains *why* it helps
    when one fired, otherwise here — so no measured win (or slowdown) is ever silently dropped.
    """

    id = "PS100"
    name = "measured-knob"
    doc = RuleDoc(
        detects="a measured knob no diagnosis explains",
        threshold="—",
        evidence="the sweep's outcome",
        fix="the knob's code change",
        gain="measured",
        guard="none needed: it reports the measurement as it is; not a win unless decidedly faster",
    )
    groups = ("sweep",)

    def check_after(self, ctx: RuleContext, findings: list[Finding]) -> list[Finding]:
        explained = {f.trial for f in findings if f.trial}
        out = []
        for o in ctx.results.sweep.knobs if ctx.results.sweep else []:
            if ctx.measured(o.knob) is not o or o.trial in explained:  # measured, and no diagnosis reported it
                continue
            g = o.gain
            setting = f" ({o.setting})" if o.setting and o.setting not in o.title else ""
            title = (f"{o.title}{setting}" if g.faster else f"{o.title}{setting}: slower here" if g.verdict == "slower"
                     else f"{o.title}{setting}: no significant change")
            out.append(Finding(
                rule_id=self.id, title=title,
                severity="medium" if g.significant and g.ratio > 1.1 else "low" if g.significant and g.ratio > 1 else "info",
                evidence=[f"measured {g.ratio:.3f}× per sample vs the baseline ({confidence_text(g.confidence)} CI {g.low:.3f}–{g.high:.3f})"]
                + ([o.reason] if o.reason else []),
                fix=o.code_change or "", gain=g, trial=o.trial, caveats=list(o.changes_semantics),
                # The slices the knob declares it acts on (none for a knob this version does not know: an older file).
                addresses=next((list(k.addresses) for k in knobs.REGISTRY if k.id == o.knob), []),
            ))
        return out

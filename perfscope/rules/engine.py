"""The rules engine: run every rule on the results, isolate failures, de-duplicate, rank.

    findings = run_rules(results)                  # ranked: measured gains, then estimates, then diagnoses
    ranked, not_significant = partition_findings(findings)

Design notes: docs/rules.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from perfscope.ranking import partition_findings, rank_findings
from perfscope.results import (
    DatasetProfile,
    Finding,
    KnobOutcome,
    Results,
    TraceFacts,
    Trial,
    TrialMetrics,
)
from perfscope.results.roles import baseline_run, dataset_profile

__all__ = ["Rule", "RuleContext", "RuleDoc", "partition_findings", "run", "up_to"]


@dataclass(frozen=True)
class RuleContext:
    """What a rule may read. `facts` is the baseline's trace facts (None when no trace was captured)."""

    results: Results
    baseline: Trial
    metrics: TrialMetrics
    facts: TraceFacts | None

    @classmethod
    def build(cls, results: Results) -> RuleContext | None:
        trial = baseline_run(results)
        if trial is None or trial.metrics is None:
            return None
        return cls(results=results, baseline=trial, metrics=trial.metrics, facts=trial.metrics.trace_facts)

    @property
    def dataset_profile(self) -> DatasetProfile | None:
        """The baseline configuration's Dataset profile (perfscope.results.roles.dataset_profile)."""
        return dataset_profile(self.results, self.baseline)

    @property
    def cuda(self) -> bool:
        return self.results.environment.device_type == "cuda"

    @property
    def device(self) -> str:
        """The run's device type: every `fix` text is written for it (no `.cuda()` in a CPU run's advice)."""
        return self.results.environment.device_type

    def config(self, key: str, default: Any = None) -> Any:
        """A setting of the user's loop; ``default`` when it was not observed (hooks cannot see every setting)."""
        if key in self.baseline.unknown_settings:
            return default
        return getattr(self.baseline.config, key, default)

    def knob(self, knob_id: str) -> KnobOutcome | None:
        sweep = self.results.sweep
        return next((o for o in sweep.knobs if o.knob == knob_id), None) if sweep else None

    def measured(self, knob_id: str) -> KnobOutcome | None:
        """``knob_id``'s outcome when the sweep measured it: a gain from a run other than the baseline."""
        o = self.knob(knob_id)
        return o if o is not None and o.status == "measured" and o.gain is not None and o.trial not in (None, self.baseline.name) else None

    def won(self, knob_id: str) -> KnobOutcome | None:
        """``knob_id``'s outcome when the sweep measured it decidedly faster."""
        o = self.measured(knob_id)
        return o if o is not None and o.gain is not None and o.gain.faster else None


@dataclass(frozen=True, kw_only=True)
class RuleDoc:
    """A rule's catalogue entry, declared beside its code: docs/rules.md and `perfscope rules ID` are generated from
    it and the docstring (perfscope.rules.docs), so the documentation cannot drift from the rule."""

    detects: str
    threshold: str
    evidence: str
    fix: str
    gain: str
    """How the gain is known: measured (which knobs), estimated (the method and its bound), or not quantified."""
    guard: str
    """What keeps the rule from firing falsely."""


class Rule:
    """Base class. The subclass docstring is the rule's documentation (anti-pattern, then best practice); ``doc`` its
    catalogue entry."""

    id: ClassVar[str]
    name: ClassVar[str]
    doc: ClassVar[RuleDoc]
    groups: ClassVar[tuple[str, ...]] = ()
    knobs: ClassVar[tuple[str, ...]] = ()
    """Sweep knobs whose measured gain this rule reports (the generic measured-knob rule leaves them alone)."""
    addresses: ClassVar[tuple[str, ...]] = ()
    """Slices of the step-time breakdown its fix acts on (perfscope.results.breakdown.SLICES keys); the engine puts
    them on every finding of the rule that does not name its own. Empty: the fix acts on memory or numerics."""
    gap_parts: ClassVar[tuple[str, ...]] = ()
    """Parts of the MFU waterfall (perfscope.results.waterfall.PARTS keys) its fix acts on beyond those its
    `addresses` reach (a "step"-wide fix: the parts it shrinks most)."""

    def check(self, ctx: RuleContext) -> list[Finding]:
        return []

    def check_after(self, ctx: RuleContext, findings: list[Finding]) -> list[Finding]:
        """Optional second pass that sees the other rules' findings (e.g. to report what they left out)."""
        return []

    def why_not_here(self, ctx: RuleContext, outcome: KnobOutcome) -> str | None:
        """Why the measured fix did not help on this machine, and whether it would pay on other hardware (None:
        nothing to add); the finding leaves the ranked fixes whatever this says."""
        return None

    def measured(self, ctx: RuleContext, finding: Finding, knob_id: str) -> Finding:
        """Attach what the sweep measured for the fix ``knob_id``: the measurement replaces any estimate; one not
        decidedly faster moves the finding to "measured, did not help here" (docs/rules.md)."""
        outcome = ctx.measured(knob_id)
        if outcome is None:
            return finding
        finding.trial = outcome.trial
        finding.caveats = list(dict.fromkeys(finding.caveats + outcome.changes_semantics))
        finding.gain = outcome.gain
        finding.estimated_gain = finding.estimate_method = finding.estimate_bound = None
        if finding.measured_no_help:
            finding.why_not_here = self.why_not_here(ctx, outcome)
        return finding


def up_to(finding: Finding, share: float, method: str, bound: str) -> Finding:
    """Estimate the fix as removing a measured ``share`` of the step outright: an upper bound, 1 / (1 − share), worded
    "up to"; no estimate when the share is not strictly between 0 and 1."""
    if 0 < share < 1:
        finding.estimated_gain, finding.cause_share, finding.upper_bound = 1 / (1 - share), share, True
        finding.estimate_method, finding.estimate_bound = method, bound
    return finding


def run(results: Results, rules: list[Rule]) -> list[Finding]:
    ctx = RuleContext.build(results)
    if ctx is None:
        return []
    findings: list[Finding] = []
    for second_pass in (False, True):
        for rule in rules:
            try:
                found = rule.check_after(ctx, list(findings)) if second_pass else rule.check(ctx)
                for f in found:
                    f.addresses = f.addresses or list(rule.addresses)
                findings += found
            except Exception as exc:  # noqa: BLE001 - one broken rule must not cost the user the others
                warnings.warn(f"perfscope rule {rule.id} ({rule.name}) failed: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
    unique: dict[tuple[str, str | None], Finding] = {}
    for f in findings:  # one finding per (rule, measured trial): the first
        unique.setdefault((f.rule_id, f.trial), f)
    return rank_findings(list(unique.values()))

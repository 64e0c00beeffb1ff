"""The one ranking: what comes first, what is the recommended fix, what is measured or estimated, what is set apart.

Design notes: docs/internals.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from perfscope.results import Finding, Gain, KnobOutcome, Results
from perfscope.results.messages import NUMERICS
from perfscope.results.roles import baseline_configuration

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
KNOB_STATUS_ORDER = {"measured": 1, "rejected": 2, "failed": 3, "skipped": 4, "inapplicable": 5}
"""A knob's place after the measured wins (group 0): the other measured knobs, then those the numerics guard
rejected, then failed, skipped and inapplicable ones."""

GainOf = Callable[[KnobOutcome], Gain | None]
"""A knob's gain as ranked (`gain_of`, computed once per `rank_results`)."""


class Tier(IntEnum):
    """Where a fix ranks; lower is shown first."""

    RECOMMENDED = 0  # the sweep's recommendation, with its all-runs gain, its knobs' findings folded in
    MEASURED_WIN = 1  # measured decidedly faster here, by measured ratio
    ESTIMATE = 2  # estimated gain, by estimated ratio
    DIAGNOSIS = 3  # no number, by severity
    NO_HELP = 4  # measured and did not help here: set apart, by ratio


class Evidence(str, Enum):
    """What a fix's number rests on: the words every renderer shows next to it."""

    MEASURED = "measured"
    ESTIMATED = "estimated"
    NOT_QUANTIFIED = "not quantified"


def tier_of(finding: Finding) -> Tier:
    """The tier of a finding on its own (the recommendation is decided from the sweep, in `rank_results`)."""
    if finding.measured_win:
        return Tier.MEASURED_WIN
    if finding.gain is not None:
        return Tier.NO_HELP
    if finding.estimated_gain is not None:
        return Tier.ESTIMATE
    return Tier.DIAGNOSIS


EVIDENCE = {Tier.RECOMMENDED: Evidence.MEASURED, Tier.MEASURED_WIN: Evidence.MEASURED, Tier.NO_HELP: Evidence.MEASURED,
            Tier.ESTIMATE: Evidence.ESTIMATED, Tier.DIAGNOSIS: Evidence.NOT_QUANTIFIED}
"""What a tier's number rests on."""


def finding_key(finding: Finding) -> tuple[int, float, int, float, int]:
    """(tier, -measured cause share, tier, -number, severity): sort ascending. Diagnoses have no number; severity orders
    them. Estimates and diagnoses share a first place, so a measured cause ranks before either (module docstring)."""
    severity = SEVERITY_ORDER.get(finding.severity, 9)
    tier = tier_of(finding)
    if finding.gain is not None:
        return (tier, 0.0, tier, -finding.gain.ratio, severity)
    cause = -(finding.cause_share or 0.0)
    if finding.estimated_gain is not None:
        return (Tier.ESTIMATE, cause, tier, -finding.estimated_gain, severity)
    return (Tier.ESTIMATE, cause, tier, float(severity), severity)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_key)


def partition_findings(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(ranked fixes, measured but did not help here), each ranked: a fix measured here as slower, the same or
    undecided is never a ranked fix, whatever its rule believes."""
    ranked = [f for f in findings if not f.measured_no_help]
    rest = [f for f in findings if f.measured_no_help]
    return rank_findings(ranked), rank_findings(rest)


def knob_key(outcome: KnobOutcome, gain: Gain | None = None) -> tuple[int, float]:
    """Best first: measured wins by gain, then the other measured knobs (undecided, same, slower) by gain, then
    rejected, failed, skipped, inapplicable. ``gain`` overrides the outcome's own (the report's `gain_of`)."""
    gain = gain if gain is not None else outcome.gain
    ratio = gain.ratio if gain is not None else 0.0
    if outcome.status == "measured" and gain is not None and gain.faster:
        return (0, -ratio)
    return (KNOB_STATUS_ORDER.get(outcome.status, 9), -ratio if outcome.status in ("measured", "rejected") else 0.0)


def gain_of(results: Results, outcome: KnobOutcome) -> Gain | None:
    """A knob's gain as every part of the report shows it: the recommended configuration's gain is the sweep's
    `recommended_gain`, measured over all its runs, also where the knob's outcome recorded an earlier figure."""
    sweep = results.sweep
    if sweep is not None and sweep.recommended_gain is not None and outcome.trial == sweep.recommended_trial:
        return sweep.recommended_gain
    return outcome.gain


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The sweep's recommendation as the report shows it; None from `recommendation` means: keep the baseline."""

    configuration: str
    knobs: tuple[str, ...]
    gain: Gain


def recommendation(results: Results) -> Recommendation | None:
    sweep = results.sweep
    if sweep is None or sweep.recommended_gain is None or sweep.recommended_trial in (None, baseline_configuration(results)):
        return None
    return Recommendation(configuration=sweep.recommended_trial or "", knobs=tuple(sweep.recommended_knobs), gain=sweep.recommended_gain)


@dataclass(frozen=True, kw_only=True)
class RankedFix:
    """One item of the ranked list. `findings` is one finding, or for the recommendation its knobs' findings
    (none when no rule spoke for them). `gain` is the gain every renderer shows (None: an estimate or nothing)."""

    rank: int
    tier: Tier
    findings: tuple[Finding, ...]
    gain: Gain | None = None
    recommendation: Recommendation | None = None

    @property
    def recommended(self) -> bool:
        return self.tier is Tier.RECOMMENDED

    @property
    def evidence(self) -> Evidence:
        return EVIDENCE[self.tier]

    @property
    def finding(self) -> Finding | None:
        return self.findings[0] if self.findings else None


@dataclass(frozen=True, kw_only=True)
class GainRow:
    """One point of the gain chart: a measured knob, or the recommended stack (knob None)."""

    label: str
    gain: Gain
    rejected: bool = False
    knob: str | None = None


@dataclass(frozen=True, kw_only=True)
class Ranking:
    fixes: list[RankedFix] = field(default_factory=list)
    no_help: list[RankedFix] = field(default_factory=list)
    knobs: list[KnobOutcome] = field(default_factory=list)
    """Every knob the report lists, best first (`knob_key` with the report's gains)."""
    folded: list[KnobOutcome] = field(default_factory=list)
    """Inapplicable knobs: cut from the table, shown folded with their reasons."""
    gains: list[GainRow] = field(default_factory=list)
    recommendation: Recommendation | None = None
    """The sweep's recommendation (fix #1); None: keep the baseline."""
    alternative: KnobOutcome | None = None
    """The fastest measured knob that changes the training recipe (`changes_recipe`) and beats the recommendation
    (or 1.0 without one)."""
    closest: KnobOutcome | None = None
    """No recommendation: the measured knob (keeping the recipe, not the baseline) that came closest."""
    knob_gains: dict[tuple[str, str, str], Gain | None] = field(default_factory=dict)
    """Each knob's gain (`gain_of`), decided once here; renderers read it through `gain`."""

    def gain(self, outcome: KnobOutcome) -> Gain | None:
        """The gain every view shows for this knob (`gain_of`, as ranked)."""
        return self.knob_gains.get(_outcome_key(outcome), outcome.gain)


def _outcome_key(outcome: KnobOutcome) -> tuple[str, str, str]:
    return (outcome.knob, outcome.trial or "", outcome.setting or "")


def _knob_of(results: Results, finding: Finding) -> KnobOutcome | None:
    sweep = results.sweep
    if sweep is None or not finding.trial:
        return None
    return next((o for o in sweep.knobs if o.trial and o.trial == finding.trial), None)


def _shown_gain(results: Results, finding: Finding, gain: GainOf) -> Gain | None:
    knob = _knob_of(results, finding)
    if knob is not None and finding.gain is not None and (g := gain(knob)) is not None:
        return g
    return finding.gain


def _fixes(results: Results, ranked: list[Finding], rec: Recommendation | None, gain: GainOf) -> list[RankedFix]:
    rest = list(ranked)
    out: list[RankedFix] = []
    if rec is not None:
        mine = tuple(f for f in rest if (o := _knob_of(results, f)) is not None and o.knob in rec.knobs)
        rest = [f for f in rest if f not in mine]
        out.append(RankedFix(rank=1, tier=Tier.RECOMMENDED, findings=mine, gain=rec.gain, recommendation=rec))
    for f in rest:
        out.append(RankedFix(rank=len(out) + 1, tier=tier_of(f), findings=(f,), gain=_shown_gain(results, f, gain)))
    return out


def _gains(results: Results, knobs: list[KnobOutcome], gain: GainOf) -> list[GainRow]:
    sweep = results.sweep
    keyed: list[tuple[tuple[int, float], GainRow]] = []
    for o in knobs:
        g = gain(o)
        if o.status in ("measured", "rejected") and g is not None:
            label = o.title + (f" · {o.setting}" if o.setting and o.setting not in o.title else "")
            keyed.append((knob_key(o, g), GainRow(label=label, gain=g, rejected=o.status == "rejected", knob=o.knob)))
    if sweep is not None and sweep.recommended_gain is not None and len(sweep.recommended_knobs) > 1:
        g = sweep.recommended_gain
        stack = KnobOutcome(knob="", title="", status="measured", gain=g)
        keyed.append((knob_key(stack), GainRow(label="recommended: " + " + ".join(sweep.recommended_knobs), gain=g)))
    keyed.sort(key=lambda kv: kv[0])
    return [row for _, row in keyed]


def changes_recipe(outcome: KnobOutcome) -> bool:
    """Whether adopting the knob changes the training recipe (a larger global batch, another optimizer), not only its
    numerics: a numerics change (code "numerics": mixed precision, TF32) passed the numerics guard to be measured,
    and may be recommended with its caveat; a recipe change is only ever the alternative."""
    return any(s.code != NUMERICS for s in outcome.changes_semantics)


def _best(knobs: list[tuple[KnobOutcome, Gain | None]], keep: Callable[[KnobOutcome, Gain], bool]) -> KnobOutcome | None:
    """The measured knob with the highest gain that ``keep`` accepts; a tie keeps the earlier knob."""
    best: tuple[KnobOutcome, Gain] | None = None
    for o, g in knobs:
        if o.status == "measured" and g is not None and keep(o, g) and (best is None or g.ratio > best[1].ratio):
            best = (o, g)
    return best[0] if best else None


def rank_results(results: Results) -> Ranking:
    """The ranking every renderer reads. Findings not run (None) rank as none."""
    rec = recommendation(results)
    ranked, no_help = partition_findings(list(results.findings or []))
    sweep_knobs = results.sweep.knobs if results.sweep else []
    gains = {_outcome_key(o): gain_of(results, o) for o in sweep_knobs}  # once per knob; every view reads these

    def gain(o: KnobOutcome) -> Gain | None:
        return gains[_outcome_key(o)]

    ordered = sorted(sweep_knobs, key=lambda o: knob_key(o, gain(o)))
    gained = [(o, gain(o)) for o in sweep_knobs]
    floor, base = rec.gain.ratio if rec else 1.0, baseline_configuration(results)  # what the alternative must beat
    return Ranking(
        fixes=_fixes(results, ranked, rec, gain),
        no_help=[RankedFix(rank=i, tier=Tier.NO_HELP, findings=(f,), gain=f.gain)
                 for i, f in enumerate(no_help, 1)],
        knobs=[o for o in ordered if o.status != "inapplicable"],
        folded=[o for o in ordered if o.status == "inapplicable"],
        gains=_gains(results, ordered, gain),
        recommendation=rec,
        alternative=_best(gained, lambda o, g: g.faster and changes_recipe(o) and g.ratio > floor
                          and not (rec is not None and o.knob in rec.knobs)),
        closest=None if rec is not None else _best(gained, lambda o, g: o.trial != base and not changes_recipe(o)),
        knob_gains=gains,
    )

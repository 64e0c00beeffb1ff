"""The one ranking (perfscope.ranking): its rules as a table, and every renderer presenting its order.

The table drives `rank_results` with small findings and knobs and states the order, the tier and the evidence it
must give; the second half drives the HTML, the Markdown, the story and the charts with one Results and checks
that each shows the findings, the knobs and the gains in the order the ranking returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from perfscope.ranking import Evidence, Tier, gain_of, knob_key, rank_results
from perfscope.report.charts import gain_chart
from perfscope.report.headline import build_story
from perfscope.report.html import render_html
from perfscope.report.markdown import render_markdown
from perfscope.report.view import build_view
from perfscope.results import Finding, Gain, KnobOutcome, Results, Sweep
from perfscope.results.messages import Message
from tests.factories import make_full_results, make_results, make_trial


def gain(ratio: float, verdict: str = "faster") -> Gain:
    return Gain(ratio=ratio, low=ratio * 0.97, high=ratio * 1.03, confidence=0.99, verdict=verdict, runs=3, reference_runs=3)  # type: ignore[arg-type]


def measured(rule: str, ratio: float, verdict: str = "faster", severity: str = "medium", trial: str | None = None) -> Finding:
    return Finding(rule_id=rule, title=rule, severity=severity, evidence=[], fix="", gain=gain(ratio, verdict), trial=trial)  # type: ignore[arg-type]


def estimated(rule: str, ratio: float, severity: str = "medium", cause: float | None = None) -> Finding:
    return Finding(rule_id=rule, title=rule, severity=severity, evidence=[], fix="", estimated_gain=ratio, estimate_method="model",  # type: ignore[arg-type]
                   cause_share=cause)


def diagnosis(rule: str, severity: str, cause: float | None = None) -> Finding:
    return Finding(rule_id=rule, title=rule, severity=severity, evidence=[], fix="", cause_share=cause)  # type: ignore[arg-type]


def knob(name: str, status: str = "measured", ratio: float | None = None, verdict: str = "faster", semantics: tuple[str, ...] = ()) -> KnobOutcome:
    return KnobOutcome(knob=name, title=name, status=status, trial=name if ratio is not None else None,  # type: ignore[arg-type]
                       gain=gain(ratio, verdict) if ratio is not None else None, changes_semantics=[Message(code) for code in semantics])


@dataclass
class Case:
    findings: list[Finding] = field(default_factory=list)
    knobs: list[KnobOutcome] = field(default_factory=list)
    recommended: tuple[str, tuple[str, ...], float] | None = None  # (configuration, knobs, ratio)
    fixes: list[str] = field(default_factory=list)  # expected rule ids in order ("+"-joined for a folded stack)
    tiers: list[Tier] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    no_help: list[str] = field(default_factory=list)
    knob_order: list[str] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)
    gains: list[str] = field(default_factory=list)
    alternative: str | None = None
    closest: str | None = None


CASES = {
    "measured wins first by ratio, then estimates by ratio, then diagnoses by severity": Case(
        findings=[diagnosis("low", "low"), estimated("est-1.2", 1.2), measured("m-1.1", 1.1), estimated("est-3", 3.0),
                  diagnosis("high", "high"), measured("m-1.5", 1.5)],
        fixes=["m-1.5", "m-1.1", "est-3", "est-1.2", "high", "low"],
        tiers=[Tier.MEASURED_WIN] * 2 + [Tier.ESTIMATE] * 2 + [Tier.DIAGNOSIS] * 2,
        evidence=[Evidence.MEASURED] * 2 + [Evidence.ESTIMATED] * 2 + [Evidence.NOT_QUANTIFIED] * 2),
    "measured beats believed: slower, same or undecided is set apart, by ratio": Case(
        findings=[measured("slower", 0.8, "slower"), estimated("est", 1.1), measured("undecided", 1.04, "undecided"),
                  measured("same", 1.0, "same")],
        fixes=["est"], tiers=[Tier.ESTIMATE], evidence=[Evidence.ESTIMATED], no_help=["undecided", "same", "slower"]),
    "a measured cause ranks before any estimate whose cause was not measured, by its share; measured wins stay first": Case(
        findings=[estimated("est-3", 3.0), diagnosis("data-wait", "high", cause=0.6), estimated("gc", 1.17, "low", cause=0.05),
                  measured("m-1.1", 1.1), diagnosis("plain", "high")],
        fixes=["m-1.1", "data-wait", "gc", "est-3", "plain"],
        tiers=[Tier.MEASURED_WIN, Tier.DIAGNOSIS, Tier.ESTIMATE, Tier.ESTIMATE, Tier.DIAGNOSIS],
        evidence=[Evidence.MEASURED, Evidence.NOT_QUANTIFIED, Evidence.ESTIMATED, Evidence.ESTIMATED, Evidence.NOT_QUANTIFIED]),
    "a tie on the number goes to the higher severity": Case(
        findings=[estimated("medium", 1.3, "medium"), estimated("high", 1.3, "high")], fixes=["high", "medium"]),
    "a full tie keeps the rules' registry order": Case(
        findings=[diagnosis("first", "low"), diagnosis("second", "low"), diagnosis("third", "low")], fixes=["first", "second", "third"]),
    "the recommendation is #1 with its knobs' findings folded in, whatever their own ratios": Case(
        findings=[measured("a", 1.2, trial="a"), measured("other", 1.6, trial="other"), measured("b", 1.1, trial="b")],
        knobs=[knob("a", ratio=1.2), knob("b", ratio=1.1), knob("other", ratio=1.6, semantics=("global_batch",))],
        recommended=("a+b", ("a", "b"), 1.3), fixes=["a+b", "other"], tiers=[Tier.RECOMMENDED, Tier.MEASURED_WIN],
        knob_order=["other", "a", "b"], gains=["other", "recommended: a + b", "a", "b"], alternative="other"),
    "knobs: measured wins by gain, other measured by gain, then rejected, failed, skipped; inapplicable folded": Case(
        knobs=[knob("skip", "skipped"), knob("n/a", "inapplicable"), knob("slow", ratio=0.7, verdict="slower"),
               knob("rej", "rejected", ratio=2.0), knob("fail", "failed"), knob("und", ratio=1.05, verdict="undecided"),
               knob("win", ratio=1.02)],
        knob_order=["win", "und", "slow", "rej", "fail", "skip"], folded=["n/a"], gains=["win", "und", "slow", "rej"], closest="und"),
    "the alternative changes the recipe and must beat the recommendation; no finding: the sweep's own item": Case(
        knobs=[knob("r", ratio=1.5), knob("sem-slow", ratio=1.4, semantics=("global_batch",)),
               knob("sem-fast", ratio=1.8, semantics=("training_recipe",))],
        recommended=("r", ("r",), 1.5), fixes=["sweep"], knob_order=["sem-fast", "r", "sem-slow"], alternative="sem-fast"),
    "mixed precision that passed the numerics guard is no alternative: it may be recommended, or be the closest": Case(
        knobs=[knob("amp", ratio=1.3, verdict="undecided", semantics=("numerics",)),
               knob("keep", ratio=1.01, verdict="undecided"), knob("bf16-fast", ratio=1.8, semantics=("numerics",))],
        recommended=("r", ("keep",), 1.1), fixes=["sweep"], knob_order=["bf16-fast", "amp", "keep"], alternative=None),
    "no recommendation: a numerics change is the closest, a recipe change the alternative": Case(
        knobs=[knob("amp", ratio=1.3, verdict="undecided", semantics=("numerics",)),
               knob("mb", ratio=1.9, semantics=("global_batch",))],
        knob_order=["mb", "amp"], alternative="mb", closest="amp"),
    "no recommendation: the closest keeps semantics, and nothing measured is not a fix": Case(
        knobs=[knob("sem", ratio=1.9, semantics=("global_batch",)), knob("keep", ratio=1.01, verdict="undecided")],
        knob_order=["sem", "keep"], alternative="sem", closest="keep"),
}


def case_results(case: Case) -> Results:
    results = make_results([make_trial("baseline")])
    results.findings = list(case.findings)
    rec = case.recommended
    if case.knobs or rec:
        results.sweep = Sweep(baseline_trial="baseline", recommended_trial=rec[0] if rec else "baseline", knobs=list(case.knobs),
                              recommended_knobs=list(rec[1]) if rec else [], recommended_gain=gain(rec[2]) if rec else None)
    return results


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_ranking_rules(case: Case) -> None:
    ranking = rank_results(case_results(case))
    assert ["+".join(f.rule_id for f in fix.findings) or "sweep" for fix in ranking.fixes] == case.fixes
    assert [fix.rank for fix in ranking.fixes] == list(range(1, len(case.fixes) + 1))
    if case.tiers:
        assert [fix.tier for fix in ranking.fixes] == case.tiers
    if case.evidence:
        assert [fix.evidence for fix in ranking.fixes] == case.evidence
    assert [fix.finding.rule_id for fix in ranking.no_help if fix.finding] == case.no_help
    assert all(fix.tier is Tier.NO_HELP for fix in ranking.no_help)
    assert [k.knob for k in ranking.knobs] == case.knob_order
    assert [k.knob for k in ranking.folded] == case.folded
    if case.gains:
        assert [r.label for r in ranking.gains] == case.gains
    assert (ranking.alternative.knob if ranking.alternative else None) == case.alternative
    assert (ranking.closest.knob if ranking.closest else None) == case.closest


def test_recommendation_shows_its_all_runs_gain_and_is_not_the_baseline() -> None:
    case = CASES["the recommendation is #1 with its knobs' findings folded in, whatever their own ratios"]
    results = case_results(case)
    first = rank_results(results).fixes[0]
    assert first.recommended and first.gain is not None and first.gain.ratio == 1.3
    results.sweep.recommended_trial = "baseline"  # type: ignore[union-attr]
    assert not any(fix.recommended for fix in rank_results(results).fixes)


def test_gain_of_is_the_recommendations_gain_for_its_configuration() -> None:
    results = case_results(Case(knobs=[knob("r", ratio=1.2)], recommended=("r", ("r",), 1.25)))
    (outcome,) = results.sweep.knobs  # type: ignore[union-attr]
    assert gain_of(results, outcome).ratio == 1.25  # type: ignore[union-attr]
    assert knob_key(outcome) == (0, -1.2) and knob_key(outcome, gain_of(results, outcome)) == (0, -1.25)


def test_the_sweep_sorts_its_knobs_with_the_rankings_key() -> None:
    import perfscope.search.sweep as sweep

    assert sweep.knob_key is knob_key


# --------------------------------------------------------------------------- every renderer, one order


def one_results() -> Results:
    """The full fixture, with findings of every tier (its findings are unsorted on purpose)."""
    results = make_full_results()
    results.findings = [diagnosis("PSX-low", "low"), estimated("PSX-est", 1.6), *list(results.findings or []), diagnosis("PSX-high", "high")]
    return results


def test_html_markdown_story_and_charts_follow_the_ranking() -> None:
    results = one_results()
    ranking = rank_results(results)
    titles = [fix.finding.title if not fix.recommended else None for fix in ranking.fixes]
    assert len(ranking.fixes) >= 4 and ranking.fixes[0].recommended

    view = build_view(results)
    assert [v.rank for v in view.findings] == [fix.rank for fix in ranking.fixes]
    assert [v.title for v in view.findings][1:] == titles[1:] and view.findings[0].recommended
    assert [v.title for v in view.no_change] == [fix.finding.title for fix in ranking.no_help if fix.finding]
    assert [k.knob for k in view.knobs] == [k.knob for k in ranking.knobs]

    md = render_markdown(results)
    headings = re.findall(r"^### (\d+)\. (.+?) — ", md, flags=re.M)
    assert [int(n) for n, _ in headings[: len(view.findings)]] == [v.rank for v in view.findings]
    assert [t for _, t in headings[1: len(view.findings)]] == titles[1:]

    html = render_html(results)
    positions = [html.index(title) for title in titles[1:]]
    assert positions == sorted(positions) and html.index(view.findings[0].title.split(":")[0]) < positions[0]

    story = build_story(results, ranking)
    assert story is not None and story.recommended is not None
    assert story.recommended.configuration == ranking.fixes[0].recommendation.configuration  # type: ignore[union-attr]
    assert story.recommended.gain == ranking.fixes[0].gain
    assert (story.alternative.knobs[0] if story.alternative else None) == (ranking.alternative.knob if ranking.alternative else None)

    chart = gain_chart(ranking.gains)
    assert chart is not None and view.gain_chart is not None
    assert chart.figure["data"][0]["y"] == view.gain_chart.figure["data"][0]["y"] == [r.label for r in ranking.gains]
    breakdown = next(c for c in view.charts if c.id == "baseline-breakdown")
    marked = [int(m) for text in breakdown.figure["data"][0]["text"] for m in re.findall(r"#(\d+)", text)]
    assert set(marked) <= {fix.rank for fix in ranking.fixes}


def test_the_report_asks_for_each_knobs_gain_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One Ranking per view: its gains are decided once per knob and every part of the page reads them."""
    import perfscope.ranking as ranking_module

    results = one_results()
    asked: list[str] = []
    real = ranking_module.gain_of
    monkeypatch.setattr(ranking_module, "gain_of", lambda r, o: asked.append(o.knob) or real(r, o))
    build_view(results)
    assert results.sweep is not None and sorted(asked) == sorted(o.knob for o in results.sweep.knobs)

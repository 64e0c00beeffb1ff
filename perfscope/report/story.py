"""The report's one story: what to do, how much faster it measured, against what, and what else is faster.

    story = build_story(results, rank_results(results))
    story.recommended      # the sweep's recommendation (keeps the global batch), or None: keep the baseline
    story.alternative      # the fastest measured option that changes semantics, when it beats the recommendation

Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope import knobs
from perfscope.ranking import Ranking
from perfscope.report.format import fmt_interval, gain_text
from perfscope.results import Gain, KnobOutcome, Results, RunNoise
from perfscope.results.config import TrialConfig
from perfscope.results.roles import baseline_configuration
from perfscope.stats import confidence_text
from perfscope.wording import words


@dataclass(frozen=True, kw_only=True)
class Option:
    """One configuration the story names: its knobs with their winning values, its measured gain, its caveats."""

    configuration: str
    knobs: list[str]
    settings: list[str]
    """Each knob's winning value in words ("micro-batch 32 × accumulation 1"), in knob order."""
    gain: Gain
    caveats: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return " + ".join(self.settings) if self.settings else " + ".join(self.knobs)


@dataclass(frozen=True, kw_only=True)
class Story:
    recommended: Option | None
    """None: nothing that keeps the global batch was decidedly faster — keep the baseline."""
    alternative: Option | None
    """The fastest measured option that changes training semantics and beats the recommendation."""
    baseline: str
    baseline_runs: int
    noise: RunNoise | None
    baseline_settings: list[str] = field(default_factory=list)
    """The baseline's own settings in words ("micro-batch 8 × accumulation 1", "fp32", ...): what "keep" keeps."""
    closest: Option | None = None
    """When the baseline is kept: the measured option that came closest (its gain and interval, not significant)."""
    unfinished: list[str] = field(default_factory=list)
    """A sweep that stopped early (budget, Ctrl-C, SIGTERM): what it did not finish; its recommendation is what it
    decided before (perfscope.search.decided)."""


def _setting(outcome: KnobOutcome | None, knob: str) -> str:
    if outcome is None:
        return knob
    return f"{outcome.title}: {outcome.setting}" if outcome.setting and outcome.setting not in outcome.title else outcome.title


def _knob_option(o: KnobOutcome | None, ranking: Ranking) -> Option | None:
    """One measured knob as an option (the alternative, the closest), with the gain the ranking shows for it."""
    if o is None or (gain := ranking.gain(o)) is None:
        return None
    return Option(configuration=o.trial or o.knob, knobs=[o.knob], settings=[_setting(o, o.knob)], gain=gain,
                  caveats=[words(c) for c in o.changes_semantics])


def build_story(results: Results, ranking: Ranking) -> Story | None:
    """The story of a sweep; None for results without one (hooks, a single trial). ``ranking``: the render's one
    (perfscope.ranking.rank_results of the same results) decides what is recommended, the alternative and the closest."""
    sweep = results.sweep
    if sweep is None:
        return None
    base = baseline_configuration(results)
    outcomes = {o.knob: o for o in sweep.knobs}
    rec = ranking.recommendation
    recommended = None
    if rec is not None:
        caveats = [words(c) for k in rec.knobs if k in outcomes for c in outcomes[k].changes_semantics]
        recommended = Option(configuration=rec.configuration, knobs=list(rec.knobs),
                             settings=[_setting(outcomes.get(k), k) for k in rec.knobs],
                             gain=rec.gain, caveats=list(dict.fromkeys(caveats)))
    runs = results.runs(base)
    reference = runs[0] if runs else next((t for t in results.trials if t.configuration == base), None)
    return Story(recommended=recommended, alternative=_knob_option(ranking.alternative, ranking),
                 closest=_knob_option(ranking.closest, ranking), baseline=base, baseline_runs=len(runs), noise=sweep.noise,
                 baseline_settings=settings_words(reference.config, reference.unknown_settings) if reference else [],
                 unfinished=list(sweep.unfinished))


def settings_words(config: TrialConfig, unknown: list[str] | None = None) -> list[str]:
    """A configuration's settings that matter to its speed, in words, as each knob words its own
    (`Knob.config_words`): the micro-batch first, then the registry's order; settings the run did not
    observe (``unknown``) left out."""
    unknown = unknown or []
    ordered = sorted(knobs.REGISTRY, key=lambda k: k.search == "variants")  # the micro-batch first
    words = [w for k in ordered if not set(k.settings) & set(unknown) and (w := k.config_words(config))]
    return list(dict.fromkeys(words))


# ------------------------------------------------------------------------------------------- words


def interval_words(gain: Gain) -> str:
    return f"{confidence_text(gain.confidence).replace('%', ' %')} CI {fmt_interval(gain.low, gain.high)}"  # the report's "99 %"


def recommendation_line(story: Story) -> str:
    r = story.recommended
    stopped = f" (the sweep stopped early; not finished: {'; '.join(story.unfinished)})" if story.unfinished else ""
    if r is None:
        return "Keep your configuration: nothing that keeps your training recipe was measured decidedly faster" + stopped
    if stopped:
        stopped = f", decided before the sweep stopped; not finished: {'; '.join(story.unfinished)}"
    return f"{r.label}: {gain_text(r.gain.ratio)}{stopped}"

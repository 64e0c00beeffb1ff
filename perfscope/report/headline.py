"""The report's one story and its headline: what to do, how much faster it measured, against what, what else is
faster (`build_story`), and the baseline beside the recommendation (MFU, step time, throughput, memory) with the
story's lines (`headline_view`, `tell`).

    story = build_story(results, rank_results(results))
    story.recommended      # the sweep's recommendation (keeps the global batch), or None: keep the baseline

Every rate-based figure is scaled to the runs the gain was measured over (perfscope.report.reference), so the
rows and the gain say the same thing. Design notes: docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope import knobs
from perfscope.ranking import Ranking, Recommendation
from perfscope.report.format import NA, Cell, fmt_bytes, fmt_interval, fmt_percent, fmt_rate, fmt_seconds, gain_text
from perfscope.report.reference import configuration_rate, gain_figures
from perfscope.results import Gain, KnobOutcome, Results, RunNoise, Trial
from perfscope.results.config import TrialConfig
from perfscope.results.roles import baseline_configuration
from perfscope.stats import confidence_text
from perfscope.wording import reason, words

# ------------------------------------------------------------------------------------------- the story

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


# ------------------------------------------------------------------------------------------- the headline


@dataclass(kw_only=True, slots=True)
class HeadlineRow:
    label: str
    values: list[Cell]  # one per headline column
    change: str = ""  # recommended vs baseline, e.g. "1.82× faster"
    better: bool | None = None  # colours the change; None when neutral or unknown


@dataclass(kw_only=True, slots=True)
class Headline:
    columns: list[Cell]  # text: role ("Baseline"), note: the trial's name
    rows: list[HeadlineRow]
    gain: str = ""  # the recommendation's measured speed-up with its interval
    gain_significant: bool | None = None
    message: str = ""  # shown instead of rows when there is nothing to compare
    lead: str = ""  # one sentence above the rows when only the baseline is shown, saying why
    recommendation: str = ""  # what to do, in one line (the story above)
    settings: list[str] = field(default_factory=list)  # every recommended knob with its winning value
    reference: str = ""  # which runs the gain is measured against
    noise: str = ""  # this machine's run-to-run noise
    alternative: str = ""  # the fastest option that changes semantics, with its gain and caveat
    closest: str = ""  # keeping the baseline: how close the best measured option came, with its interval
    settings_label: str = "Settings"  # "Your settings" when the baseline is kept
    why: str = ""  # why the baseline is slow: its largest step-time slice and the fix that addresses it
    caveats: list[str] = field(default_factory=list)  # semantics the recommendation itself changes (numerics)


def _reason(trial: Trial, metric: str) -> str:
    m = trial.metrics
    return (reason(m.unavailable, metric) if m else "") or "not measured"


def step_cell(trial: Trial, scale: float = 1.0) -> Cell:
    """Wall time per step; ``scale`` (a rate over this run's) turns it into the step time at that rate."""
    m = trial.metrics
    assert m is not None
    s = m.typical_step
    note = f"typical step {fmt_seconds(s.median)} (p10–p90 {fmt_seconds(s.p10)} – {fmt_seconds(s.p90)})" if s else ""
    return Cell(text=fmt_seconds(m.mean_step_time_s / scale), note=note)


def memory_label(results: Results) -> str:
    """What "peak memory" is on this run: the caching allocator's peak on a GPU, the process's host RSS on a CPU."""
    return "Peak memory (allocator peak)" if results.environment.device_type == "cuda" else "Peak memory (host RSS)"


def tell(headline: Headline, story: Story | None) -> Headline:
    """The story's lines on the headline: what to do, its gain, settings, reference, noise, the alternative."""
    if story is None:
        return headline
    headline.recommendation, headline.lead = recommendation_line(story), ""
    if (r := story.recommended) is not None:
        g = r.gain
        headline.settings, headline.caveats = list(r.settings), list(r.caveats)
        headline.reference = (f"vs {g.reference}, {g.runs} run{'s' if g.runs != 1 else ''} against {g.reference_runs} "
                              f"{g.reference} run{'s' if g.reference_runs != 1 else ''}")
        headline.gain, headline.gain_significant = f"{gain_text(g.ratio)} ({interval_words(g)})", g.significant
    else:
        headline.reference = f"your configuration ({story.baseline}), measured in {story.baseline_runs} runs"
        headline.settings, headline.settings_label = list(story.baseline_settings), "Your settings"
        headline.closest = ("no other configuration that keeps your training recipe was measured (see the knobs, the notes "
                            "and the warnings)")
        if (c := story.closest) is not None:  # how close the best measured option came
            verdict = {"slower": "slower", "same": "no change", "undecided": "not significant"}.get(c.gain.verdict,
                                                                                                  "not in the recommendation")
            headline.closest = f"closest measured: {c.label}: {gain_text(c.gain.ratio)} ({interval_words(c.gain)}), {verdict}"
    if (n := story.noise) is not None and n.sigma is not None:
        mde = f"; one comparison detects changes of about {n.mde:.0%} or more" if n.mde is not None else ""
        headline.noise = f"run-to-run noise ±{n.sigma:.1%} (σ of log throughput over {n.runs} baseline runs){mde}"
    if (a := story.alternative) is not None:
        headline.alternative = (f"Faster if you accept a change in semantics: {a.label}: {gain_text(a.gain.ratio)} "
                                f"({interval_words(a.gain)}); caveat: {'; '.join(a.caveats)}")
    return headline


def headline_view(results: Results, base: Trial | None, rec: Trial | None, recommendation: Recommendation | None) -> Headline:
    """The rows; the recommendation's gain and words are the ranking's, told by `tell`."""
    if base is None:
        return Headline(columns=[], rows=[], message="No trials were recorded.")
    if not base.ok:
        return Headline(
            columns=[],
            rows=[],
            message=f"The baseline trial {base.name!r} did not complete (status: {base.status}); see Failed trials.",
        )
    shown = [(Cell(text="Baseline", note=base.name), base)]
    if rec is not None and rec.ok:
        shown.append((Cell(text="Recommended", note=rec.name), rec))
    trials = [t for _, t in shown]
    both = len(trials) == 2
    bm = base.metrics
    rm = trials[-1].metrics
    assert bm is not None and rm is not None
    gain = recommendation.gain if recommendation is not None else None
    # The figures the gain was computed from (report/reference.py): each run's rate-based figures are scaled to them.
    figures = gain_figures(results, gain, candidate=trials[-1].configuration) if both and gain else None
    rates = [figures.reference_rate, figures.rate] if figures else [t.metrics.samples_per_s for t in trials]  # type: ignore[union-attr]
    scales = [r / t.metrics.samples_per_s if r and t.metrics.samples_per_s else 1.0 for r, t in zip(rates, trials)]  # type: ignore[union-attr]
    rate_note = figures.words if figures is not None else ""
    if not both and (kept := configuration_rate(results, base.configuration)) is not None and kept[1] > 1:
        rates, scales = [kept[0]], [kept[0] / bm.samples_per_s if bm.samples_per_s else 1.0]
        rate_note = f"geometric mean of its {kept[1]} runs"

    rows: list[HeadlineRow] = []

    def mfu_cell(t: Trial, scale: float) -> Cell:
        m = t.metrics
        if m is None or m.mfu is None:
            return Cell(text=NA, note=_reason(t, "mfu"))
        note = f"{fmt_rate(m.achieved_tflops * scale, 'TFLOP/s')} achieved" if m.achieved_tflops is not None else ""
        return Cell(text=fmt_percent(m.mfu * scale), note=note)

    mfu_row = HeadlineRow(label="MFU", values=[mfu_cell(t, k) for t, k in zip(trials, scales)])
    if both and bm.mfu is not None and rm.mfu is not None:
        delta = (rm.mfu * scales[1] - bm.mfu * scales[0]) * 100
        mfu_row.change, mfu_row.better = f"{delta:+.1f} pts", delta > 0 if delta else None
    rows.append(mfu_row)

    step_row = HeadlineRow(label="Step time (wall / steps)", values=[step_cell(t, k) for t, k in zip(trials, scales)])
    if both:
        ratio = gain.ratio if gain else bm.mean_step_time_s / rm.mean_step_time_s
        step_row.change, step_row.better = gain_text(ratio), ratio > 1
        if gain and not gain.significant:
            step_row.better = None
    rows.append(step_row)

    rows.append(_rate_row("Throughput", "samples/s", rates, both, gain))
    rows[-1].values[0].note = rate_note  # where the figure comes from: the runs the gain was measured against
    if any(t.metrics.tokens_per_s is not None for t in trials):  # type: ignore[union-attr]
        tokens = [t.metrics.tokens_per_s * k if t.metrics.tokens_per_s is not None else None for t, k in zip(trials, scales)]  # type: ignore[union-attr]
        rows.append(_rate_row("Tokens", "tokens/s", tokens, both, gain))

    def mem_cell(t: Trial) -> Cell:
        m = t.metrics
        assert m is not None
        if m.peak_memory_bytes is None:
            return Cell(text=NA, note=_reason(t, "peak_memory_bytes"))
        cap = m.device_memory_capacity_bytes or (results.environment.host_memory_bytes if results.environment.device_type != "cuda" else None)
        what = "device memory" if results.environment.device_type == "cuda" else "host memory"
        note = f"{m.peak_memory_bytes / cap * 100:.0f} % of {fmt_bytes(cap)} {what}" if cap else ""
        return Cell(text=fmt_bytes(m.peak_memory_bytes), note=note)

    mem_row = HeadlineRow(label=memory_label(results), values=[mem_cell(t) for t in trials])
    if both and bm.peak_memory_bytes and rm.peak_memory_bytes:
        change = rm.peak_memory_bytes / bm.peak_memory_bytes - 1
        mem_row.change = f"{change * 100:+.0f} %"
        mem_row.better = (change < 0) if abs(change) >= 0.005 else None
    rows.append(mem_row)

    headline = Headline(columns=[c for c, _ in shown], rows=rows)
    if not both:
        if results.sweep is not None and results.sweep.recommended_trial == base.configuration:
            headline.lead = "The sweep found no configuration significantly faster than the baseline: the baseline is the recommendation."
        elif results.sweep is not None:
            headline.lead = "The sweep did not produce a recommendation (see the notes under the knobs); the numbers below are the baseline."
        else:
            headline.lead = "One configuration measured (no sweep): the numbers below are the baseline."
    return headline


def _rate_row(label: str, unit: str, values: list[float | None], both: bool, gain: Gain | None = None) -> HeadlineRow:
    """A throughput row; its change is the measured gain (all runs, paired), the same number as the headline's."""
    row = HeadlineRow(label=label, values=[Cell(text=fmt_rate(v, unit)) for v in values])
    if both and gain is not None:
        row.change, row.better = gain_text(gain.ratio), (gain.ratio > 1) if gain.significant else None
    elif both and values[0] and values[1]:
        ratio = values[1] / values[0]
        row.change, row.better = gain_text(ratio), ratio > 1 if abs(ratio - 1) >= 0.005 else None
    return row

"""The report's headline: the baseline beside the recommendation (MFU, step time, throughput, memory) and the
story's lines (what to do, its gain, against what, the noise, the alternative).

Every rate-based figure is scaled to the runs the gain was measured over (perfscope.report.reference), so the
rows and the gain say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfscope.ranking import Recommendation
from perfscope.report.format import NA, Cell, fmt_bytes, fmt_percent, fmt_rate, fmt_seconds, gain_text
from perfscope.report.reference import configuration_rate, gain_figures
from perfscope.report.story import Story, interval_words, recommendation_line
from perfscope.results import Gain, Results, Trial
from perfscope.wording import reason


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
    recommendation: str = ""  # what to do, in one line (perfscope.report.story)
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

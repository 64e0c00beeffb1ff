"""The headline's baseline figure is the reference the gain was computed against (report/reference.py), not the
first baseline run; the knob table shows the recommendation's gain."""

from __future__ import annotations

import math
import statistics

import pytest

from perfscope.report.format import fmt_rate
from perfscope.report.reference import gain_figures
from perfscope.report.view import build_view
from perfscope.results import KnobOutcome, Sweep
from perfscope.search.compare import compare
from tests.factories import make_results, make_runs

# The first baseline run is a lucky fast process (as in benchmarks/results/sweep_cpu.txt: 434 vs ~410).
BASE_FACTORS = [0.90, 1.00, 1.04, 0.98, 1.03, 1.01, 0.99]
CAND_FACTORS = [0.88, 0.91, 0.87]


def _sweep_results():
    base = make_runs("baseline", run_factors=BASE_FACTORS, median_s=0.1, seed=3)
    cand = make_runs("fused", run_factors=CAND_FACTORS, median_s=0.1, seed=4, knobs=["fused_optimizer"])
    for i, t in enumerate(base):  # B C B C B C B B B: interleaved as the sweep measures
        t.sequence = 2 * i + 1 if i < 4 else 7 + i - 3 + 1
    for i, t in enumerate(cand):
        t.sequence = 2 * i + 2
    gain = compare(cand, base)
    assert gain is not None
    results = make_results(base + cand)
    older = compare(cand[:1], base)  # the knob's first, smaller measurement; the recommendation re-measured it
    results.sweep = Sweep(baseline_trial="baseline", recommended_trial="fused", recommended_knobs=["fused_optimizer"],
                          recommended_gain=gain,
                          knobs=[KnobOutcome(knob="fused_optimizer", title="fused optimizer", status="measured",
                                             trial="fused", gain=older)])
    return results, base, cand, gain


def _paired_reference(base, cand) -> float:
    """By hand: each candidate run against the mean log rate of the baseline runs just before and after it."""
    by_seq = sorted(base, key=lambda t: t.sequence)
    logs = []
    for c in cand:
        before = [b for b in by_seq if b.sequence < c.sequence][-1:]
        after = [b for b in by_seq if b.sequence > c.sequence][:1]
        logs.append(statistics.fmean(math.log(b.metrics.samples_per_s) for b in before + after))
    return math.exp(statistics.fmean(logs))


def test_the_headline_shows_the_reference_the_gain_was_measured_against() -> None:
    results, base, cand, gain = _sweep_results()
    view = build_view(results)
    throughput = next(r for r in view.headline.rows if r.label == "Throughput")
    reference = _paired_reference(base, cand)
    rate = math.exp(statistics.fmean(math.log(c.metrics.samples_per_s) for c in cand))
    assert throughput.values[0].text == fmt_rate(reference, "samples/s")
    assert throughput.values[1].text == fmt_rate(rate, "samples/s")
    assert throughput.values[0].text != fmt_rate(base[0].metrics.samples_per_s, "samples/s")  # not the first run
    assert rate / reference == pytest.approx(gain.ratio, rel=1e-9)
    assert "paired" in throughput.values[0].note
    step = next(r for r in view.headline.rows if r.label.startswith("Step time"))
    samples_per_step = base[0].metrics.samples_per_s * base[0].metrics.mean_step_time_s
    assert step.values[0].text == f"{samples_per_step / reference * 1e3:.1f} ms"


def test_the_knob_table_and_the_recommendation_show_the_same_gain() -> None:
    results, _, _, gain = _sweep_results()
    view = build_view(results)
    (row,) = view.knobs
    assert row.reference == f"vs baseline ({gain.runs} : {gain.reference_runs} runs)"
    assert view.headline.gain.startswith(row.gain)


def test_recorded_rates_are_used_as_they_are() -> None:
    results, _, _, gain = _sweep_results()
    gain.rate, gain.reference_rate = 123.0, 100.0
    figures = gain_figures(results, gain, candidate="fused")
    assert figures is not None and (figures.rate, figures.reference_rate) == (123.0, 100.0)


def test_no_figure_when_the_pairing_does_not_reproduce_the_gain() -> None:
    results, _, _, gain = _sweep_results()
    gain.ratio *= 1.01  # e.g. a relative gain, measured on top of another knob
    assert gain_figures(results, gain, candidate="fused") is None

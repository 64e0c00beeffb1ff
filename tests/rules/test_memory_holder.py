"""The memory rules act on what holds a profiled step's peak, and the report says what that peak is worth beside the
allocator's (perfscope.rules._memory, PS502, the memory-categories chart). On recorded results: no device, no time.
"""

from __future__ import annotations

import pytest

from perfscope.report.charts import build_charts
from perfscope.results import Finding, MemoryBreakdown, MemoryCategories, Results
from perfscope.results.messages import msg
from perfscope.rules import run_rules
from perfscope.rules._memory import peak_agreement, peak_holder
from perfscope.wording import words
from tests.factories import make_results, make_trial

GiB = 2**30


def near_oom(at_peak: dict[str, int] | None, *, allocated: int = 74 * GiB, device_type: str = "cuda") -> Results:
    """A run at 96 % of its 80 GiB device (PS502 fires), profiled by category at ``at_peak`` (None: not profiled)."""
    results = make_results([make_trial(median_s=0.1)], device_type=device_type)
    m = results.trials[0].metrics
    assert m is not None
    m.peak_memory_bytes, m.peak_reserved_bytes, m.device_memory_capacity_bytes = allocated, 77 * GiB, 80 * GiB
    m.memory_breakdown = MemoryBreakdown(parameters=8 * GiB, gradients=8 * GiB, optimizer_state=16 * GiB,
                                         activations_and_temporaries=42 * GiB)
    if at_peak is not None:
        m.memory_categories = MemoryCategories(device="cuda:0" if device_type == "cuda" else "cpu",
                                               peak_bytes=sum(at_peak.values()), peak_category=max(at_peak, key=at_peak.__getitem__),
                                               at_peak=at_peak)
    return results


def ps502(results: Results) -> Finding:
    (finding,) = [f for f in run_rules(results) if f.rule_id == "PS502"]
    return finding


ACTIVATIONS = {"parameter": 8 * GiB, "gradient": 8 * GiB, "optimizer_state": 16 * GiB, "activation": 40 * GiB, "temporary": 2 * GiB}
STATE = {"parameter": 8 * GiB, "gradient": 8 * GiB, "optimizer_state": 48 * GiB, "activation": 8 * GiB, "temporary": 2 * GiB}
WEIGHTS = {"parameter": 24 * GiB, "gradient": 24 * GiB, "optimizer_state": 16 * GiB, "activation": 8 * GiB, "temporary": 2 * GiB}


@pytest.mark.parametrize(("at_peak", "holder"), [(ACTIVATIONS, "activation"), (STATE, "optimizer_state"), (WEIGHTS, "weights"),
                                                 (None, None)])
def test_the_holder_is_the_part_a_fix_frees_that_holds_the_most(at_peak: dict[str, int] | None, holder: str | None) -> None:
    m = near_oom(at_peak).trials[0].metrics
    assert peak_holder(m.memory_categories) == holder  # type: ignore[union-attr]


def test_activations_at_the_peak_call_for_checkpointing_as_without_categories() -> None:
    profiled, unprofiled = ps502(near_oom(ACTIVATIONS)), ps502(near_oom(None))
    for finding in (profiled, unprofiled):
        assert "checkpoint activations" in finding.title and "checkpoint(block, x" in finding.fix
    assert any("activations hold 54% of a profiled step's 74.00 GiB peak" in line for line in profiled.evidence)


def test_optimizer_state_at_the_peak_calls_for_a_lean_optimizer_or_zero1_not_checkpointing() -> None:
    finding = ps502(near_oom(STATE))
    assert "optimizer state holds the peak" in finding.title and "8-bit" in finding.title
    assert "AdamW8bit" in finding.fix and "ZeroRedundancyOptimizer" in finding.fix and "checkpoint(" not in finding.fix
    assert any("optimizer state holds 65% of a profiled step's" in line for line in finding.evidence)
    assert "48.00 GiB at the profiled peak" in (finding.estimate_bound or "")
    assert msg("checkpointing_would_not_help") in finding.caveats


def test_weights_and_gradients_at_the_peak_call_for_fsdp() -> None:
    finding = ps502(near_oom(WEIGHTS))
    assert "weights and gradients hold the peak" in finding.title
    assert "fully_shard(model, reshard_after_forward=True)" in finding.fix
    assert "48.00 GiB at the profiled peak" in (finding.estimate_bound or "")


def test_a_profiled_peak_far_below_the_allocators_is_a_caveat_and_said_in_the_report() -> None:
    agreeing = near_oom(ACTIVATIONS)  # profiled 74 GiB, allocated 74 GiB
    missed = near_oom({"activation": 20 * GiB, "parameter": 8 * GiB})  # profiled 28 GiB of the allocator's 74
    assert not any("disagree" in words(c) for c in ps502(agreeing).caveats)
    assert any("38% of the allocator's peak (74.00 GiB, max_memory_allocated); they disagree: the true peak lies outside"
               in words(c) for c in ps502(missed).caveats)
    assert peak_agreement(missed.trials[0].metrics, cuda=True).agrees is False  # type: ignore[arg-type, union-attr]
    (chart,) = [c for c in build_charts(missed, baseline="baseline", recommended=None)[0] if c.id == "memory-categories"]
    assert "they disagree" in chart.caption
    (chart,) = [c for c in build_charts(agreeing, baseline="baseline", recommended=None)[0] if c.id == "memory-categories"]
    assert "100% of the allocator's peak" in chart.caption and "disagree" not in chart.caption
    assert {t["name"] for t in chart.figure["data"]} == {"parameters", "gradients", "optimizer state", "activations",
                                                         "temporaries"}


def test_a_cpu_run_says_it_has_no_allocator_peak_to_check_against() -> None:
    results = near_oom(ACTIVATIONS, device_type="cpu")
    agreement = peak_agreement(results.trials[0].metrics, cuda=False)  # type: ignore[arg-type]
    assert agreement is not None and agreement.agrees is None  # no allocator peak to agree with
    (chart,) = [c for c in build_charts(results, baseline="baseline", recommended=None)[0] if c.id == "memory-categories"]
    assert "no allocator peak to check it against (torch keeps none on a CPU" in chart.caption
    assert not [c for c in build_charts(near_oom(None), baseline="baseline", recommended=None)[0] if c.id == "memory-categories"]

"""The diff of two runs' trace facts (perfscope.results.trace_facts): a pure function of typed results."""

from __future__ import annotations

import pytest

from perfscope.results.trace_facts import Change, diff_facts
from tests.factories import make_trace_facts


def test_trace_diff_shows_where_the_time_went():
    base = make_trace_facts()
    base.kernels.time_by_category = {"gemm": 0.080, "elementwise": 0.030}
    base.gpu.idle_fraction = 0.30
    rec = make_trace_facts()
    rec.kernels.time_by_category = {"gemm": 0.020, "elementwise": 0.010, "attention": 0.005}
    rec.gpu.idle_fraction = 0.10
    diff = diff_facts(base, rec)
    assert diff.kernel_time_by_category["gemm"].delta == pytest.approx(-0.060)
    assert diff.kernel_time_by_category["attention"] == Change(baseline=0.0, other=0.005)  # absent in one trace: 0
    assert diff.kernel_time_by_category["attention"].delta == 0.005
    assert diff.scalars["gpu_idle_fraction"].delta == pytest.approx(-0.2)
    assert list(diff.kernel_time_by_category)[0] == "gemm"  # biggest first


def test_a_fact_one_trace_lacks_is_not_compared():
    base, rec = make_trace_facts(), make_trace_facts()
    rec.gpu = None  # a CPU trace has no GPU timeline
    diff = diff_facts(base, rec)
    assert "gpu_idle_fraction" not in diff.scalars and "step_time_s" in diff.scalars

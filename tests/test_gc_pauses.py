"""Collector pauses are attributed to the step they land in: what lets PS602 say whether they explain a tail."""

from __future__ import annotations

import gc

from perfscope.measure.window import GcPauses


def test_each_collection_is_counted_in_the_step_that_was_running():
    step = 0
    with GcPauses(step_of=lambda: step) as pauses:
        gc.collect()  # step 0
        step = 2
        gc.collect()  # step 2
        gc.collect()
    per_step = pauses.per_step(4)
    assert pauses.collections >= 3 and [p > 0 for p in per_step] == [True, False, True, False]
    assert abs(sum(per_step) - pauses.pause_s) < 1e-9
    assert GcPauses().per_step(4) == []  # no step attribution asked: nothing measured per step

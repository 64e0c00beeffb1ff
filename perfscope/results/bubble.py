"""The pipeline bubble's formula: the idle share a pipeline's shape alone implies.

    bubble_formula(stages=2, microbatches=4)             # (p − 1) / (m + p − 1) = 0.2
    bubble_formula(2, 4, virtual=2)                      # interleaved, 2 stages per rank: (p − 1) / (v·m + p − 1)

Pure arithmetic on a recorded layout (ParallelFacts.pipeline_parallel, .microbatches), so it lives with the results
it describes: the measurement records it next to the measured bubble (perfscope.measure.bubble), and the
pipeline-bubble rule, the layout search and the pipeline knob predict with it, all from this one definition,
without a reader of results importing the measurement layer.
"""

from __future__ import annotations

__all__ = ["bubble_formula"]


def bubble_formula(stages: int, microbatches: int, virtual: int = 1) -> float:
    """Idle share of a fill-drain pipeline of ``stages`` equal stages and ``microbatches`` micro-batches (``virtual``
    stages per rank with an interleaved schedule), communication free."""
    if stages < 1 or microbatches < 1 or virtual < 1:
        raise ValueError("stages, microbatches and virtual stages must be >= 1")
    return (stages - 1) / (virtual * microbatches + stages - 1)

"""Interval arithmetic against its definition, sampled on a fine grid."""

from __future__ import annotations

import random

import pytest

from perfscope.trace.intervals import Span, clip, gaps, length, merge, overlap, subtract


def _covered(spans: list[Span], t: float) -> bool:
    return any(s <= t < e for s, e in spans)


def _random_spans(rng: random.Random, n: int) -> list[Span]:
    out = []
    for _ in range(n):
        s = rng.randint(0, 95)
        out.append((float(s), float(s + rng.randint(0, 12))))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_operations_match_their_definitions(seed: int) -> None:
    rng = random.Random(seed)
    a, b = _random_spans(rng, 12), _random_spans(rng, 6)
    grid = [x + 0.5 for x in range(-5, 115)]
    merged = merge(a)
    assert all(merged[i][1] < merged[i + 1][0] for i in range(len(merged) - 1))
    assert length(a) == sum(_covered(a, t) for t in grid)
    assert [t for t in grid if _covered(subtract(a, b), t)] == [t for t in grid if _covered(a, t) and not _covered(b, t)]
    window = (10.0, 80.0)
    assert [t for t in grid if _covered(gaps(a, window), t)] == [t for t in grid if 10 <= t < 80 and not _covered(a, t)]
    assert length(clip(a, window)) == sum(_covered(a, t) for t in grid if 10 <= t < 80)
    for span in [(0.0, 100.0), (12.0, 13.0), (40.0, 70.0)]:
        assert overlap(span, merged) == sum(_covered(a, t) for t in grid if span[0] <= t < span[1])

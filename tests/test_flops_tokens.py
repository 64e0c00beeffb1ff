"""FLOPs per step under dynamic padding: FLOPs per token × the tokens the window processed (measure/tokens.py)."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from perfscope.measure.tokens import TokenTally, batch_tokens, per_token_scale
from perfscope.results.config import TrialConfig
from perfscope.trial.loop import run_trial
from perfscope.workload import Workload

VOCAB, WIDTH = 50, 16
PER_TOKEN = 6 * WIDTH * VOCAB  # the Linear head: forward, weight grad and input grad, 2·16·50 each


def _padded_batches(n: int):
    """Each batch padded to its own length: 4 and 12 token positions alternately (mean 8)."""
    for length in itertools.cycle([4, 12]):
        yield torch.randint(0, VOCAB, (n, length))


def _loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())


def test_a_variable_length_window_counts_flops_per_token() -> None:
    workload = Workload(model=lambda: nn.Sequential(nn.Embedding(VOCAB, WIDTH), nn.Linear(WIDTH, VOCAB)),
                        batches=_padded_batches, loss=_loss, batch_size=2)
    run = run_trial(workload, TrialConfig(micro_batch_size=2, steps=4, warmup_steps=1, sample_utilization=False))
    metrics = run.metrics
    # One batch counted (12 or 4 positions) would give 1.5× or 0.5× the truth; the window averaged 8 per sample.
    assert metrics.flops_per_step == PER_TOKEN * 2 * 8
    assert "flops_per_token" in [n.code for n in metrics.flop_notes]  # how the count was scaled


def test_fixed_shapes_keep_the_counted_batch() -> None:
    tally = TokenTally()
    for _ in range(3):
        tally.add(torch.zeros(2, 8, dtype=torch.long))
    assert per_token_scale(torch.zeros(2, 8, dtype=torch.long), tally) is None


def test_tokens_are_the_first_integer_matrix() -> None:
    assert batch_tokens({"pixels": torch.zeros(2, 3, 4, 4), "ids": torch.zeros(2, 7, dtype=torch.long),
                         "mask": torch.ones(2, 9, dtype=torch.long)}) == 14
    assert batch_tokens((torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))) is None  # labels only: no sequence

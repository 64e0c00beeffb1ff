"""The sharding memory model: bytes per rank of parameters, gradients and optimizer state under DDP and ZeRO-1/2/3."""

from __future__ import annotations

import pytest

from perfscope.measure.memory import DDP, ZERO1, ZERO2, ZERO3, sharding_memory, strategy_of
from perfscope.results.config import TrialConfig

GB = 10**9


def _rows(**kw):
    return {r.strategy: (r.parameters, r.gradients, r.optimizer_state, r.total) for r in sharding_memory(**kw)}


def test_ten_billion_parameters_with_fp32_adamw_on_eight_ranks():
    """The docstring's example: 16 B/parameter (4 + 4 + 8), 10B parameters, 8 ranks."""
    rows = _rows(parameter_bytes=40 * GB, gradient_bytes=40 * GB, optimizer_state_bytes=80 * GB, world_size=8)
    assert list(rows) == ["DDP", "ZeRO-1 (ZeroRedundancyOptimizer)", "ZeRO-2 (FSDP2, no reshard after forward)",
                          "ZeRO-3 (FSDP2, reshard after forward)"]
    assert rows[DDP] == (40 * GB, 40 * GB, 80 * GB, 160 * GB)
    assert rows[ZERO1] == (40 * GB, 40 * GB, 10 * GB, 90 * GB)
    assert rows[ZERO2] == (40 * GB, 5 * GB, 10 * GB, 55 * GB)
    assert rows[ZERO3] == (5 * GB, 5 * GB, 10 * GB, 20 * GB)


def test_mixed_precision_convention_differs_only_in_the_split():
    """bf16 parameters and gradients, fp32 master weights and moments (2 + 2 + 12 B): ZeRO-3 is the same 20 GB."""
    rows = _rows(parameter_bytes=20 * GB, gradient_bytes=20 * GB, optimizer_state_bytes=120 * GB, world_size=8)
    assert rows[DDP][3] == 160 * GB and rows[ZERO1][3] == 55 * GB
    assert rows[ZERO2][3] == 37_500_000_000 and rows[ZERO3][3] == 20 * GB


def test_shards_round_up_and_one_rank_shards_nothing():
    rows = _rows(parameter_bytes=10, gradient_bytes=10, optimizer_state_bytes=21, world_size=4)
    assert rows[ZERO3] == (3, 3, 6, 12)  # ceil(10/4) = 3, ceil(21/4) = 6: padded shards, never fewer bytes than held
    assert rows[ZERO1] == (10, 10, 6, 26)
    alone = _rows(parameter_bytes=7, gradient_bytes=7, optimizer_state_bytes=14, world_size=1)
    assert set(alone.values()) == {(7, 7, 14, 28)}
    with pytest.raises(ValueError, match="world_size"):
        sharding_memory(parameter_bytes=1, gradient_bytes=1, optimizer_state_bytes=1, world_size=0)
    with pytest.raises(ValueError, match=">= 0"):
        sharding_memory(parameter_bytes=-1, gradient_bytes=1, optimizer_state_bytes=1, world_size=2)


def test_a_configuration_names_its_row():
    base = TrialConfig(micro_batch_size=8, nproc_per_node=2, data_parallel="ddp")
    assert strategy_of(base) == DDP
    assert strategy_of(base.replace(data_parallel="zero1")) == ZERO1
    assert strategy_of(base.replace(data_parallel="fsdp")) == ZERO3
    assert strategy_of(base.replace(data_parallel="fsdp", reshard_after_forward=False)) == ZERO2
    assert strategy_of(base.replace(data_parallel="none")) is None

"""The collective micro-benchmark in a real 2-process gloo group (spawned; a FileStore rendezvous, no port)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from perfscope.measure.peaks import OPS, benchmark_collective


def _worker(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    try:
        result = {op: benchmark_collective(op, 1 << 20, device="cpu", iters=3) for op in OPS}
        alone = [dist.new_group([r]) for r in range(world)]  # every rank creates every group
        result["alone"] = benchmark_collective("all_reduce", 1 << 20, device="cpu", group=alone[rank])
        Path(out, f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_bus_bandwidth_of_each_collective_in_a_two_rank_gloo_group(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1))
    for op in OPS:
        assert r0[op] is not None and r0[op] > 0, op
        assert r0[op] == r1[op], op  # one figure for the group: each call as the rank that waited least saw it
    assert r0["alone"] is None and r1["alone"] is None  # a group of one moves nothing over a link


def test_unknown_collective_is_refused_before_any_communication():
    with pytest.raises(ValueError, match="all_to_all"):
        benchmark_collective("all_to_all", 1024, device="cpu")

"""Rank agreement inside a real 2-process gloo group (spawned; a FileStore rendezvous, no port)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from perfscope.trial.data_parallel import max_over_ranks


def _worker(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    try:
        # Each rank calibrated its own window (10 and 13 steps): all must run the same number, or one rank's extra
        # step pairs its all-reduce with a peer's next collective and the job deadlocks (seen in a benchmark run).
        Path(out, f"{rank}.json").write_text(json.dumps(max_over_ranks(10 + 3 * rank, "cpu")))
    finally:
        dist.destroy_process_group()


def test_ranks_agree_on_the_most_steps_any_rank_calibrated(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    assert [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)] == [13, 13]


def test_one_process_keeps_its_own_count():
    assert max_over_ranks(7, "cpu") == 7

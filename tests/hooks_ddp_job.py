"""`torchrun --standalone --nproc-per-node 2 hooks_ddp_job.py OUT`: a tiny DDP loop (gloo) with perfscope.Profiler on
every rank, as a user writes it.

Run by tests/test_hooks_distributed.py. What it saves:
- OUT/snap: `save(final=False)` at step 15, through `gather_object` (the fallback where the group has no store);
- OUT/job: the final `save()`, through the job's store, every rank calling it, with every rank's trace;
- OUT/late: a second profiler whose rank 1 never calls save(): rank 0 writes after its 1 s deadline.
Each rank writes what its save() calls returned to OUT/returned<rank>.json.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from perfscope.hooks import distributed as hooks_distributed
from perfscope.hooks.profiler import Profiler

QUIET = {"measure_ceiling": False, "sample_utilization": False, "peak_tflops": 1.0}
SAMPLES, BATCH, WARMUP = 400, 8, 2  # 25 steps per rank
CAPTURE = (21, 23)  # traced (step 20: the profiler's warm-up), in each rank's own temporary trace_dir


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(SAMPLES, 32, generator=g), torch.randint(0, 16, (SAMPLES,), generator=g))
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    returned: dict[str, str | None] = {}

    prof = Profiler(model, opt, device="cpu", warmup_steps=WARMUP, name="ddp-hooks", capture_steps=CAPTURE, memory=True,
                    **QUIET)
    for i, (x, y) in enumerate(prof.wrap(loader)):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
        if i == 15:
            store = hooks_distributed._default_store
            hooks_distributed._default_store = lambda: None
            returned["snap"] = str(prof.save(out / "snap", final=False))
            hooks_distributed._default_store = store
    returned["job"] = str(prof.save(out / "job"))

    late = Profiler(model, opt, device="cpu", warmup_steps=1, count_flops=False, gather_timeout_s=1.0, **QUIET)
    for i, (x, y) in enumerate(late.wrap(loader)):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        late.step()
        if i == 4:
            break
    if rank == 0:
        returned["late"] = str(late.save(out / "late"))
    (out / f"returned{rank}.json").write_text(json.dumps(returned))
    # Tear the group down while the interpreter lives. The DDP model holds the process group, and torch's first
    # optimizer (its lazy dynamo import) keeps this frame alive, so without the `del` the group's gloo threads
    # outlive main() and one that frees a finished allreduce during interpreter shutdown aborts the rank
    # ("terminate called without an active exception", about one job in eight).
    del prof, late, model, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

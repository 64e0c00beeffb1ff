"""Writes the real 2-rank gloo trace fixtures that test the communication analysis (perfscope.trace.communication):

    PYTHONPATH=. python -m torch.distributed.run --standalone --nproc-per-node 2 tests/gloo_traces.py ddp
    PYTHONPATH=. python -m torch.distributed.run --standalone --nproc-per-node 2 tests/gloo_traces.py fsdp2

→ tests/data/traces/gloo/<strategy>/rank<R>.json.gz, captured by perfscope's own TraceCapture (3 steps; the
fsdp2 run keeps rank 0 only, to keep the fixtures small). A 3-layer MLP whose 4 MB of gradients make the
collectives visible next to its compute: DDP with 1 MB buckets (three all-reduces overlapping the backward),
FSDP2 with one unit per linear (all-gathers before each layer, reduce-scatters after its backward; gloo has no
reduce-scatter, so they show as all-reduces).
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "data" / "traces" / "gloo"


def main(strategy: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from perfscope.trace.capture import TraceCapture

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 256))
    if strategy == "ddp":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with TraceCapture(FIXTURES / strategy, device="cpu", wait=1, warmup=1, active=3) as cap:
        for _ in range(cap.total_steps):
            with torch.profiler.record_function("perfscope::data"):
                x = torch.randn(32, 256)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    if strategy != "ddp" and dist.get_rank() != 0 and cap.path is not None:
        cap.path.unlink()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ddp")

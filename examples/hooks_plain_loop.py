"""perfscope hooks in a plain PyTorch training loop (CPU is fine): three added lines, marked `# perfscope`.

    python examples/hooks_plain_loop.py --out /tmp/hooks-run        # -> /tmp/hooks-run/results.json (+ report.html)
    python examples/hooks_plain_loop.py --accum 4 --workers 2        # gradient accumulation, DataLoader workers
    PERFSCOPE_DISABLE=1 python examples/hooks_plain_loop.py          # the same loop, profiler switched off

The loop is an ordinary one: a Dataset, a DataLoader, AdamW, optional gradient accumulation. The profiler
measures step time, time blocked on the DataLoader, samples/s, FLOPs and MFU, memory and CPU load, and
`perfscope report` / `perfscope check` read the results like those of `perfscope analyze`.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import perfscope
from perfscope.results import Results


class SyntheticImages(torch.utils.data.Dataset):
    """Deterministic 'images' and labels, generated per index (as a disk-backed dataset would load them)."""

    def __init__(self, n: int, dim: int, classes: int) -> None:
        self.n, self.dim, self.classes = n, dim, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.dim, generator=g), i % self.classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="perfscope-hooks", help="output folder for results.json and report.html")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--accum", type=int, default=1, help="gradient accumulation: micro-batches per optimizer step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    model.to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # 2,000 samples: the last batch of each epoch is short (2000 = 31 x 64 + 16); perfscope counts it as it is.
    loader = torch.utils.data.DataLoader(
        SyntheticImages(2000, 256, 10), batch_size=args.batch_size, shuffle=True, num_workers=args.workers
    )

    prof = perfscope.Profiler(model, optimizer=optimizer, device=args.device, name="hooks-plain-loop")  # perfscope
    for epoch in range(args.epochs):
        for i, (x, y) in enumerate(prof.wrap(loader)):  # perfscope: wrap() measures time blocked on data
            x, y = x.to(args.device), y.to(args.device)
            loss = F.cross_entropy(model(x), y) / args.accum
            loss.backward()
            if (i + 1) % args.accum == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                prof.step()  # perfscope: the end of one optimizer step
        print(f"epoch {epoch}: last loss {loss.item() * args.accum:.3f}")  # once per epoch: one sync, outside the steps

    path = prof.save(args.out)  # perfscope
    if path is not None:
        results = Results.load(path)
        m = results.trials[0].metrics
        print(f"results: {path}")
        print(f"{m.steps} timed steps, {m.mean_step_time_s * 1e3:.2f} ms/step (wall / steps), {m.samples_per_s:.0f} samples/s, "
              f"data wait {m.data_wait_share:.0%}, MFU {'n/a' if m.mfu is None else f'{m.mfu:.1%}'}")


if __name__ == "__main__":
    main()

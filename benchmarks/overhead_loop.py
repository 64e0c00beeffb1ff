"""A user's training loop, run as its own process by benchmarks/hook_overhead.py; prints one JSON line.

    python benchmarks/overhead_loop.py --loop compute --mode plain      # perfscope is never imported
    python benchmarks/overhead_loop.py --loop compute --mode hooks      # perfscope.Profiler at its defaults

The loop times itself, as its author would: the host clock around steps [--skip, --skip + --steps), after
the profiler's warm-up and FLOP-counting step; the parent (hook_overhead.py) times the whole process, which
adds the import, the construction, those steps and `prof.save()` (hooks modes; --no-save skips it). Minor page
faults per timed step show the allocator's state (memory handed back to the kernel and faulted in again) without
depending on the machine's load. Loops:
- compute: a 3-layer MLP, batch 64, one intra-op thread (about 4-5 ms a step on a server core);
- data: the same model fed by a DataLoader with 2 workers whose samples cost CPU time to build.
Modes besides plain and hooks (defaults): the hooks without one part each (benchmarks/allocator_state.py), without
the capture listener (hooks-nolive) or with the watch (hooks-watch: benchmarks/live_overhead.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn


class Synthetic(torch.utils.data.Dataset):
    """Samples that cost real CPU work to produce (a small FFT per sample), like decoding or augmentation."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(512, generator=g)
        for _ in range(4):
            x = torch.fft.irfft(torch.fft.rfft(x), n=512)
        return x, i % 10


def _start_side_thread(kind: str) -> None:
    """A background thread like the hooks' utilization sampler: waking every 0.1 s, idle or reading psutil."""
    import threading

    import psutil

    def run() -> None:
        while not threading.Event().wait(0.1):
            if kind == "psutil":
                psutil.cpu_percent(interval=None)

    threading.Thread(target=run, daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", choices=("compute", "data"), required=True)
    parser.add_argument("--mode", choices=("plain", "hooks", "hooks-nosampler", "hooks-noflops", "hooks-bare",
                                                "hooks-nolive", "hooks-watch", "import-only", "construct-only"),
                        required=True)
    parser.add_argument("--skip", type=int, default=60)
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--no-save", action="store_true", help="hooks: skip prof.save() at the end")
    parser.add_argument("--trim-after", type=int, default=None, help="experiment: glibc malloc_trim(0) after this step")
    parser.add_argument("--side-thread", choices=("idle", "psutil"), default=None,
                        help="experiment: from step 5, a thread that wakes every 0.1 s and does nothing / reads "
                             "psutil.cpu_percent")
    parser.add_argument("--fault-trace", action="store_true",
                        help="experiment: add the minor faults of every step (warm-up included) to the JSON line")
    parser.add_argument("--import-first", action="store_true",
                        help="import perfscope before the model is built (at the top of the script, as users write it)")
    args = parser.parse_args()
    phases: dict[str, float] = {}
    if args.import_first and args.mode != "plain":
        t0 = time.perf_counter()
        import perfscope.hooks  # noqa: F401

        phases["import_s"] = time.perf_counter() - t0

    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = 512
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total = args.skip + args.steps
    if args.loop == "compute":
        fixed = [(torch.randn(64, width), torch.randint(0, 10, (64,))) for _ in range(16)]
        batches = (fixed[i % 16] for i in range(total))
    else:
        loader = torch.utils.data.DataLoader(Synthetic(), batch_size=64, num_workers=2, persistent_workers=True)
        batches = (b for _, b in zip(range(total), loader))

    prof = None
    if args.mode == "import-only":  # experiments: which part of the hooks changes the allocator's state
        from perfscope.hooks import Profiler  # noqa: F401
    elif args.mode == "construct-only":
        from perfscope.hooks import Profiler

        unused = Profiler(model, opt)  # noqa: F841 - constructed, never stepped
    elif args.mode != "plain":
        t0 = time.perf_counter()
        from perfscope.hooks import Profiler

        t1 = time.perf_counter()
        phases.setdefault("import_s", t1 - t0)
        full = ("hooks", "hooks-nolive", "hooks-watch")  # at the defaults; no capture listener; with the watch
        prof = Profiler(model, opt, sample_utilization=args.mode in (*full, "hooks-noflops"),
                        count_flops=args.mode in (*full, "hooks-nosampler"), live=args.mode != "hooks-nolive",
                        watch=args.mode == "hooks-watch")
        batches = prof.wrap(batches)
        phases["construct_s"] = time.perf_counter() - t1

    loop0 = time.perf_counter()
    start = cpu0 = thread0 = sys0 = 0.0
    faults0 = 0
    trace: list[int] = []
    for i, (x, y) in enumerate(batches):
        if args.fault_trace:
            trace.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        if i == args.skip:
            start, cpu0, thread0, sys0 = time.perf_counter(), time.process_time(), time.thread_time(), os.times().system
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if prof is not None:
            prof.step()
        if i == 5 and args.side_thread:
            _start_side_thread(args.side_thread)
        if i == args.trim_after:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
    end, cpu1, thread1, sys1 = time.perf_counter(), time.process_time(), time.thread_time(), os.times().system
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    phases["untimed_steps_s"] = start - loop0  # steps [0, --skip): warm-up and, with hooks, the FLOP-counting step
    if prof is not None and not args.no_save:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            prof.save(out)
            phases["save_s"] = time.perf_counter() - t0
            with open(os.path.join(out, "results.json"), encoding="utf-8") as fh:  # after the timing, outside save_s
                phases["ceiling_how"] = json.load(fh)["environment"].get("measured_ceiling_how", "")
    print(json.dumps({"loop": args.loop, "mode": args.mode, "steps": args.steps, "wall_s": end - start,
                      "steps_per_s": args.steps / (end - start), "process_cpu_s": cpu1 - cpu0,
                      "main_thread_cpu_s": thread1 - thread0,
                      "kernel_cpu_s": sys1 - sys0, "minor_faults_per_step": faults / args.steps, **phases,
                      **({"faults_by_step": [b - a for a, b in zip(trace, trace[1:])]} if args.fault_trace else {})}))


if __name__ == "__main__":
    main()

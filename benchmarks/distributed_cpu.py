"""The 2-rank (gloo) analysis of the DDP example on the CPU, end to end: wall time, every rank, the job, communication,
stragglers, sharding memory, and the ranking.

    python benchmarks/distributed_cpu.py [--out DIR] [--only IDS]

No target: the figure is how long a distributed analysis takes on 2 cores (each run is a torchrun job of fresh
interpreters) and what it finds; --only restricts the knobs (e.g. the data-parallel ones) to bound the time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.sweep_report import print_ranking  # noqa: E402
from perfscope.results import Results  # noqa: E402


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def print_distributed(path: Path) -> None:
    results = Results.load(path)
    for trial in results.trials:
        facts = trial.metrics.distributed if trial.metrics else None
        if trial.name != "baseline" or facts is None:
            continue
        print(f"\nbaseline: {facts.world_size} ranks ({facts.backend}, {facts.data_parallel}), global batch {facts.global_batch}, "
              f"job {facts.job_samples_per_s:.1f} samples/s")
        print(f"{'rank':>4} {'samples/s':>10} {'step ms':>8} {'compute-only ms':>16} {'coll ms':>8} {'exposed ms':>11} {'state':>10}")
        for r in facts.ranks:
            step = r.mean_step_time_s
            local = r.mean_local_step_time_s
            coll, exposed = r.collective_s_per_step, r.exposed_collective_s_per_step
            state = sum(x or 0 for x in (r.parameter_bytes, r.gradient_bytes, r.optimizer_state_bytes))
            print(f"{r.rank:>4} {r.samples_per_s or 0:>10.1f} {step * 1e3 if step else 0:>8.1f} {local * 1e3 if local else 0:>16.1f} "
                  f"{coll * 1e3 if coll is not None else float('nan'):>8.1f} {exposed * 1e3 if exposed is not None else float('nan'):>11.1f} "
                  f"{mib(state):>10}")
        print(f"stragglers: {[(s.rank, f'{s.slower_by:+.0%}', s.cause) for s in facts.stragglers] or 'none'} ({facts.straggler_method})")
        comm = facts.communication
        if comm is not None:
            print(f"communication (rank {comm.rank}): compute {comm.compute_s * 1e3:.1f} ms, collectives {comm.collective_s * 1e3:.1f} ms, "
                  f"exposed {comm.exposed_collective_s * 1e3:.1f} ms per step, overlap {comm.overlap_share or 0:.0%}")
            for c in comm.collectives:
                print(f"  {c.op}: {c.calls_per_step:g} calls/step, {c.time_s_per_step * 1e3:.1f} ms/step, bus "
                      f"{c.bus_gbps or 0:.2f} GB/s achieved vs {c.microbench_bus_gbps or 0:.2f} GB/s alone")
        for row in facts.memory_model:
            measured = f", measured {mib(row.measured_total)}" if row.measured_total is not None else ""
            print(f"  {row.strategy}: {mib(row.total)} per rank{measured}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=ROOT / "examples" / "ddp_tiny_transformer.py")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default=None, help="comma-separated knob ids (default: every applicable knob)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="perfscope-distributed-cpu-"))
    command = [sys.executable, "-m", "perfscope", "analyze", str(args.example), "--device", "cpu", "--nproc-per-node", "2",
               "--out", str(out)]
    if args.only:
        command += ["--only", args.only]
    start = time.monotonic()
    code = subprocess.run(command, cwd=ROOT, check=False).returncode
    wall = time.monotonic() - start
    if code != 0:
        print(f"analyze exited with {code}")
        return code
    print_ranking(out / "results.json")
    print_distributed(out / "results.json")
    runs = len(Results.load(out / "results.json").trials)
    print(f"\nwall time of the whole 2-rank analysis: {wall:.1f} s ({runs} runs, each a torchrun job)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

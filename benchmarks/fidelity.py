"""Does perfscope measure what the user's own loop would? Baseline median step time vs a plain loop.

    python benchmarks/fidelity.py --example examples/tiny_transformer.py --device cpu
    python benchmarks/fidelity.py --example examples/gpt2_small.py --device cuda --steps 30

Both run in fresh processes, interleaved (plain, perfscope, plain, perfscope, ...), on the same
workload. The plain loop is written independently of perfscope's trial loop: it builds the model,
optimizer and batches from the workload's factories and times each step with a device synchronize
around a host clock. Prints each round and the ratio of medians with a bootstrap interval.
Targets: within 3% on a GPU, 5% on a CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAIN_LOOP = r'''
import json, sys, time, torch
from perfscope.workload import load_workload
wl = load_workload(sys.argv[1]); device = sys.argv[2]; steps, warmup = int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = wl.model().to(device).train()
opt = wl.optimizer([p for p in model.parameters() if p.requires_grad])
it = iter(wl.batches(wl.batch_size))
def move(b):
    if isinstance(b, torch.Tensor): return b.to(device)
    return type(b)(move(x) for x in b)
def sync():
    if device == "cuda": torch.cuda.synchronize()
times = []
for i in range(warmup + steps):
    sync(); t0 = time.perf_counter()
    batch = move(next(it))
    loss = wl.loss(model, batch)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    sync(); t1 = time.perf_counter()
    if i >= warmup: times.append(t1 - t0)
print(json.dumps(times))
'''


def plain_loop(example: Path, device: str, steps: int, warmup: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_LOOP, str(example), device, str(steps), str(warmup)],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def perfscope_loop(example: Path, device: str, steps: int, warmup: int, out_dir: Path) -> list[float]:
    from perfscope.results import Environment, Results, WorkloadInfo
    from perfscope.results.config import TrialConfig
    from perfscope.trial.session import Progress, Session
    from perfscope.workload import load_workload

    wl = load_workload(example)
    results = Results(environment=Environment(device_type=device, device_name=device), workload=WorkloadInfo(path=str(example), sha256="", name=example.stem))
    session = Session(results, out_dir=out_dir, workload_path=example, timeout_s=900, progress=Progress(stream=open("/dev/null", "w")))
    config = TrialConfig(device=device, micro_batch_size=wl.batch_size, steps=steps, warmup_steps=warmup, count_flops=False, sample_utilization=False)  # type: ignore[arg-type]
    trial = session.measure("fidelity", config)
    if not trial.ok:
        raise SystemExit(f"perfscope trial failed: {trial.status}: {trial.error}")
    return trial.metrics.step_times_s  # type: ignore[union-attr]


def main() -> None:
    from perfscope.stats import ratio_of_medians, summarize

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=ROOT / "examples" / "tiny_transformer.py")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    plain: list[float] = []
    ours: list[float] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            p = plain_loop(args.example, args.device, args.steps, args.warmup)
            o = perfscope_loop(args.example, args.device, args.steps, args.warmup, Path(tmp) / f"round{r}")
            plain += p
            ours += o
            print(f"round {r + 1}: plain median {statistics.median(p) * 1e3:8.2f} ms   perfscope median {statistics.median(o) * 1e3:8.2f} ms")
    sp, so = summarize(plain), summarize(ours)
    ratio = ratio_of_medians(ours, plain)
    print(f"\nexample: {args.example.name}  device: {args.device}  steps/round: {args.steps}  rounds: {args.rounds}")
    print(f"plain loop : median {sp.median * 1e3:.2f} ms  (p10 {sp.p10 * 1e3:.2f}, p90 {sp.p90 * 1e3:.2f})")
    print(f"perfscope  : median {so.median * 1e3:.2f} ms  (p10 {so.p10 * 1e3:.2f}, p90 {so.p90 * 1e3:.2f})")
    print(f"ratio perfscope/plain: {ratio.ratio:.4f}  (95% CI {ratio.low:.4f}-{ratio.high:.4f})")
    target = 0.03 if args.device == "cuda" else 0.05
    verdict = "PASS" if abs(ratio.ratio - 1) <= target else "FAIL"
    print(f"target: within {target:.0%} -> {verdict}   (wall {time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()

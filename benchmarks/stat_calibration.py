"""Are perfscope's verdicts calibrated? A/A and A/B experiments with fresh-process runs, on this machine.

    python benchmarks/stat_calibration.py --pairs 20          # A/A, A/B at +10% and +30% wasted work
    python benchmarks/stat_calibration.py --only aa --pairs 30

Each experiment measures two workloads, A and B, as interleaved fresh-process runs through perfscope's own
session (A B A B ... A), exactly as the sweep measures a baseline and a candidate:
- A/A: B is A. A knob verdict ("faster"/"slower") on a pair is a false alarm; target ≤ 5% of pairs. The CI
  gate (default 5% tolerance, the documented recipe: 3 runs a side) is run on consecutive disjoint groups of
  runs; a REGRESSION is a false alarm; target ≤ 5% of groups.
- A/B: B does +10% or +30% wasted work per step (extra matmuls the loss does not use). The truth is a plain
  loop (no perfscope) timing A and B in fresh processes, interleaved. Targets at +30%: "slower" in ≥ 90% of
  pairs, and the reported ratio (all runs) within ±5% of the plain loop's ratio; the gate fails ≥ 90% of groups.

A "pair" is one B run judged the way the sweep first judges a candidate: against the A runs measured just
before and after it, with the A series' run-to-run variance (perfscope.search.compare.compare).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOAD = '''
import torch, torch.nn.functional as F
from torch import nn
import perfscope

WASTE = {waste}   # extra matmuls per step (the base step does about ten of the same size)
W = 384
torch.set_num_threads(1)  # one intra-op thread: two OpenMP threads on a shared 2-core box spin at barriers
                          # whenever a neighbour takes a core, which turns noise into 10-30x slowdowns

def batches(n):
    g = torch.Generator().manual_seed(0)
    fixed = [(torch.randn(n, W, generator=g), torch.randint(0, 10, (n,), generator=g)) for _ in range(8)]
    i = 0
    while True:
        yield fixed[i % 8]
        i += 1

def loss(model, batch):
    x, y = batch
    if WASTE:
        with torch.no_grad():
            w = x.new_ones(W, W) / W
            z = x
            for _ in range(WASTE):
                z = z @ w
    return F.cross_entropy(model(x), y)

def workload():
    model = lambda: nn.Sequential(nn.Linear(W, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, 10))
    return perfscope.Workload(model=model, batches=batches, loss=loss, batch_size=64,
                              optimizer=lambda p: torch.optim.SGD(p, lr=0.01))
'''


def write_workload(folder: Path, waste: int) -> Path:
    path = folder / f"waste_{waste}.py"
    path.write_text(WORKLOAD.format(waste=waste))
    return path


def measure_series(a: Path, b: Path, pairs: int, out: Path, window_s: float) -> tuple[list, list]:
    """A B A B ... A as fresh-process runs through one runner; returns (A runs, B runs) with sequence numbers."""
    from perfscope.results import Environment, Results, WorkloadInfo
    from perfscope.results.config import TrialConfig
    from perfscope.trial.runner import TrialRunner
    from perfscope.trial.session import Progress, Session

    runner = TrialRunner(out / "trials")
    config = TrialConfig(device="cpu", micro_batch_size=64, min_window_s=window_s, count_flops=False, sample_utilization=False)
    sessions = {}
    for label, path in (("a", a), ("b", b)):
        results = Results(environment=Environment(device_type="cpu", device_name="cpu"),
                          workload=WorkloadInfo(path=str(path), sha256="", name=label))
        sessions[label] = Session(results, out_dir=out / label, workload_path=path, timeout_s=300,
                                  progress=Progress(stream=open(os.devnull, "w")), runner=runner)
    runs: dict[str, list] = {"a": [], "b": []}
    order = ["a", "b"] * pairs + ["a"]
    try:
        for seq, label in enumerate(order, 1):
            trial = sessions[label].measure(label, config)
            trial.sequence = seq
            runs[label].append(trial)
            rate = f"{trial.metrics.samples_per_s:8.1f}" if trial.ok and trial.metrics else trial.status
            print(f"  {seq:3d} {label} {rate}{'  excluded: ' + trial.excluded if trial.excluded else ''}", flush=True)
    finally:
        runner.close()
    return runs["a"], runs["b"]


def pair_verdicts(a_runs: list, b_runs: list) -> list:
    from perfscope.search.compare import compare

    return [g for b in b_runs if b.evidence and (g := compare([b], a_runs)) is not None]


def gate_outcomes(a_runs: list, b_runs: list, per_side: int) -> list[str]:
    """The CI gate on disjoint consecutive groups: baseline = per_side A runs, current = the next per_side B runs."""
    from perfscope.check.gate import GateOptions, run_gate
    from perfscope.results import Environment, Results, WorkloadInfo

    def as_results(runs: list) -> Results:
        trials = []
        for i, r in enumerate(runs):
            r.name, r.configuration = ("baseline" if i == 0 else f"baseline-r{i + 1}"), "baseline"
            trials.append(r)
        return Results(environment=Environment(device_type="cpu", device_name="cpu"),
                       workload=WorkloadInfo(path="calibration", sha256="", name="calibration"), trials=trials)

    a_ok, b_ok = [r for r in a_runs if r.evidence], [r for r in b_runs if r.evidence]
    outcomes = []
    for g in range(min(len(a_ok), len(b_ok)) // per_side):
        base = as_results([_copy(r) for r in a_ok[g * per_side:(g + 1) * per_side]])
        cur = as_results([_copy(r) for r in b_ok[g * per_side:(g + 1) * per_side]])
        report = run_gate([cur], base, GateOptions(metrics=("samples_per_s",), max_drop=0.05))
        outcomes.extend(v.status for v in report.verdicts)
    return outcomes


def _copy(trial):
    import copy

    return copy.deepcopy(trial)


def plain_truth(a: Path, b: Path, rounds: int, steps: int) -> float:
    """B's throughput over A's from a plain loop (perfscope's measurement not involved), interleaved processes."""
    from benchmarks.fidelity import plain_loop

    logs = []
    for _ in range(rounds):
        ra = plain_loop(a, "cpu", steps, 10, 0)
        rb = plain_loop(b, "cpu", steps, 10, 0)
        logs.append(math.log(rb / ra))
    return math.exp(statistics.fmean(logs))


def experiment(name: str, waste: int, args: argparse.Namespace, folder: Path) -> dict:
    from perfscope.search.compare import compare

    a, b = write_workload(folder, 0), write_workload(folder, waste)
    print(f"\n== {name}: B = +{waste} wasted matmuls per step, {args.pairs} pairs", flush=True)
    start = time.monotonic()
    a_runs, b_runs = measure_series(a, b, args.pairs, folder / name, args.window)
    gains = pair_verdicts(a_runs, b_runs)
    overall = compare(b_runs, a_runs)
    gate = gate_outcomes(a_runs, b_runs, args.per_side)
    row = {
        "experiment": name,
        "waste_matmuls": waste,
        "pairs": len(gains),
        "verdicts": {v: sum(g.verdict == v for g in gains) for v in ("faster", "slower", "same", "undecided")},
        "overall_ratio": overall.ratio if overall else None,
        "overall_interval": [overall.low, overall.high] if overall else None,
        "run_noise_sigma": statistics.stdev([math.log(r.metrics.samples_per_s) for r in a_runs if r.evidence]),
        "excluded_runs": sum(1 for r in a_runs + b_runs if r.excluded),
        "gate_groups": len(gate),
        "gate": {s: gate.count(s) for s in sorted(set(gate))},
        "wall_s": round(time.monotonic() - start, 1),
    }
    if waste:
        row["plain_ratio"] = plain_truth(a, b, args.truth_rounds, args.truth_steps)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--per-side", type=int, default=3, help="runs per side in the CI-gate groups (the documented recipe)")
    parser.add_argument("--window", type=float, default=0.5, help="calibrated window length, seconds (perfscope's default)")
    parser.add_argument("--only", choices=("aa", "ab10", "ab30"), action="append")
    parser.add_argument("--truth-rounds", type=int, default=6)
    parser.add_argument("--truth-steps", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()

    plan = [("aa", 0), ("ab10", 1), ("ab30", 3)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, waste in plan:
            if args.only and name not in args.only:
                continue
            rows.append(experiment(name, waste, args, Path(tmp)))
    print("\nexperiment  pairs  faster slower same undecided  ratio (all runs)        plain   gate (groups of %d v %d)" % (args.per_side, args.per_side))
    for r in rows:
        v = r["verdicts"]
        ratio = f"{r['overall_ratio']:.3f} [{r['overall_interval'][0]:.3f}, {r['overall_interval'][1]:.3f}]" if r["overall_ratio"] else "n/a"
        plain = f"{r['plain_ratio']:.3f}" if "plain_ratio" in r else "  -  "
        gate = ", ".join(f"{k} {n}" for k, n in r["gate"].items())
        print(f"{r['experiment']:<10} {r['pairs']:>5}  {v['faster']:>6} {v['slower']:>6} {v['same']:>4} {v['undecided']:>9}  "
              f"{ratio:<22}  {plain:>6}   {gate}")
    for r in rows:
        print(f"{r['experiment']}: run-to-run sigma {r['run_noise_sigma']:.3f}, excluded (contended) runs {r['excluded_runs']}, wall {r['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

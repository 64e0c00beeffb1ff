"""The pipeline bubble perfscope measures against (p − 1) / (v·m + p − 1), on a balanced CPU pipeline.

Each run is a fresh torchrun job of 2 gloo ranks (tests/workloads/pp_balanced.py: 8 identical MLP blocks, 4 per
stage, 4 micro-batches of 32), measured as a perfscope trial. It prints, per run, the bubble replayed from each
stage's fastest forward/backward call (perfscope.measure.bubble), the wall-clock bubble, and the formula, and per
schedule whether every replayed figure is within 5 points. Kept here, not in the suite: per-call CPU time still
moves with a loaded machine's cache and core sharing (a clean-clone CI run measured 25.3 % for 1F1B's 20 %).

    python benchmarks/pipeline_bubble.py --runs 3
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from datetime import date
from pathlib import Path

from perfscope.measure.mfu import choose_peak
from perfscope.results import Environment, Results, WorkloadInfo
from perfscope.results.config import TrialConfig
from perfscope.trial.launch import Launch
from perfscope.trial.session import Progress, Session

ROOT = Path(__file__).resolve().parent.parent
BALANCED = ROOT / "tests" / "workloads" / "pp_balanced.py"
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
WITHIN = 0.05


def measure(schedule: str, out: Path) -> tuple[float, float, float]:
    """One fresh job: (replayed, wall-clock, formula) bubble shares."""
    results = Results(environment=Environment(device_type="cpu", device_name="cpu", measured_ceiling_tflops={"fp32": 0.1}),
                      workload=WorkloadInfo(path=str(BALANCED), sha256="x", name=BALANCED.stem))
    results.peak = choose_peak(results.environment)
    session = Session(results, out_dir=out, workload_path=BALANCED, timeout_s=300, progress=Progress(), contention_retries=0,
                      launch=Launch(nproc_per_node=2, collective_timeout_s=60))
    config = TrialConfig(nproc_per_node=2, pipeline_parallel=2, pipeline_schedule=schedule, micro_batch_size=32,
                         grad_accum_steps=4, steps=10, warmup_steps=2, count_flops=False, sample_utilization=False)
    trial = session.measure("pp", config)
    if trial.status != "ok":
        raise SystemExit(f"{schedule}: the trial {trial.status}: {trial.error}")
    pp = trial.metrics.distributed.parallel
    return pp.bubble_replayed, pp.bubble_measured, pp.bubble_formula


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh jobs per schedule")
    args = parser.parse_args()
    print(f"# {date.today()}, {platform.machine()}, python {platform.python_version()}; "
          f"python benchmarks/pipeline_bubble.py --runs {args.runs}")
    for schedule in SCHEDULES:
        rows = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                replayed, wall, formula = measure(schedule, Path(tmp))
            rows.append(replayed)
            print(f"{schedule:17s} run {run + 1}: replayed {replayed:6.1%}  wall-clock {wall:6.1%}  formula {formula:6.1%}")
        worst = max(abs(r - formula) for r in rows)
        print(f"{schedule:17s} replayed within {WITHIN:.0%} of the formula in {sum(abs(r - formula) <= WITHIN for r in rows)}"
              f"/{len(rows)} runs (worst {worst * 100:.1f} points)")


if __name__ == "__main__":
    main()

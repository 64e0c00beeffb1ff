"""Is a rank with 30 ms more compute a step named a straggler from real wall-clock steps? Per run of a 2-rank gloo job.

Each run is a fresh torchrun job of tests/workloads/ddp_ranks.py whose rank 1 sleeps PERFSCOPE_TEST_STRAGGLE_S more per
micro-batch (a real sleep). It prints each rank's mean local step (compute without gradient communication), who was
named, and the slowest-rank share. Kept here, not in the suite: rank 0's sub-millisecond local steps take a loaded
machine's preemptions (tens of ms) at random, which moves the t-test; the suite's test_a_straggler_is_named runs the
same job on a simulated step clock, and tests/test_stragglers.py the decision on simulated noise.

    python benchmarks/straggler_named.py --runs 3 [--straggle 0.03]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfscope.measure.mfu import choose_peak  # noqa: E402
from perfscope.results import Environment, Results, WorkloadInfo  # noqa: E402
from perfscope.results.config import TrialConfig  # noqa: E402
from perfscope.trial.launch import Launch  # noqa: E402
from perfscope.trial.session import Progress, Session  # noqa: E402

WORKLOAD = ROOT / "tests" / "workloads" / "ddp_ranks.py"


def run_once(out: Path) -> str:
    results = Results(environment=Environment(device_type="cpu", device_name="cpu", measured_ceiling_tflops={"fp32": 0.1}),
                      workload=WorkloadInfo(path=str(WORKLOAD), sha256="x", name=WORKLOAD.stem))
    results.peak = choose_peak(results.environment)
    session = Session(results, out_dir=out, workload_path=WORKLOAD, timeout_s=300, progress=Progress(), contention_retries=0,
                      launch=Launch(nproc_per_node=2, collective_timeout_s=60))
    config = TrialConfig(micro_batch_size=8, steps=12, warmup_steps=1, nproc_per_node=2, data_parallel="ddp",
                         count_flops=False, sample_utilization=False)
    trial = session.measure("t", config)
    if trial.status != "ok":
        return f"the trial {trial.status}: {trial.error}"
    facts = trial.metrics.distributed
    means = ", ".join(f"rank {r.rank} {r.mean_local_step_time_s * 1e3:.1f} ms" for r in facts.ranks if r.mean_local_step_time_s)
    named = [(s.rank, f"{s.slower_by:+.0%}", f"slowest in {s.slowest_share:.0%} of steps") for s in facts.stragglers]
    return f"local steps: {means}; named: {named or 'none'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--straggle", type=float, default=0.03, help="rank 1's extra seconds per micro-batch")
    args = parser.parse_args()
    os.environ.update(PERFSCOPE_TEST_RANK_MODE="straggle", PERFSCOPE_TEST_STRAGGLE_S=str(args.straggle))
    os.environ.pop("PERFSCOPE_TEST_SIM_CLOCK", None)
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as out:
            print(f"run {i + 1}: {run_once(Path(out))}", flush=True)


if __name__ == "__main__":
    main()

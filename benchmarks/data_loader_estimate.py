"""The data-loader rule's estimate against what DataLoader workers measured, on a data-bound Dataset workload.

    python benchmarks/data_loader_estimate.py                       # analyze examples/cpu_heavy_dataset.py, then compare
    python benchmarks/data_loader_estimate.py --from RUN/results.json

The rule estimates, from the baseline run alone (its data wait, its Dataset profile, this machine's usable cores),
what k workers would do; the sweep measured k workers in fresh processes interleaved with baseline runs. For
every worker count the sweep measured, this prints the estimate the rule makes for that count, the measured gain
with its interval, and whether the estimate is within 25% of the measurement. It also checks that the
data-loader finding ranks first. Target: every count within 25%.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfscope.results import Gain, Results  # noqa: E402
from perfscope.results.roles import baseline_run  # noqa: E402
from perfscope.rules import partition_findings, run_rules  # noqa: E402
from perfscope.rules.data_loader_stall import DataLoaderStall, loader_estimate  # noqa: E402
from perfscope.rules.engine import RuleContext  # noqa: E402
from perfscope.search.compare import compare  # noqa: E402

TOLERANCE = 0.25
EXAMPLE = ROOT / "examples" / "cpu_heavy_dataset.py"


@dataclass(frozen=True)
class Row:
    workers: int
    configuration: str
    estimated: float
    measured: Gain

    @property
    def error(self) -> float:
        """estimate / measured − 1."""
        return self.estimated / self.measured.ratio - 1

    @property
    def within(self) -> bool:
        return abs(self.error) <= TOLERANCE


def estimate_vs_measured(results: Results) -> list[Row]:
    """One row per worker count the sweep measured (its first variant's runs against the baseline's)."""
    blind = copy.deepcopy(results)
    blind.sweep = None  # the rule estimates from the baseline alone, as it does when the workers were not measured
    ctx = RuleContext.build(blind)
    assert ctx is not None, "no baseline run"
    wait = ctx.metrics.data_wait_share or (ctx.facts.data_wait_fraction if ctx.facts else 0.0)
    base = results.sweep.baseline_trial if results.sweep else "baseline"
    rows = []
    for configuration in sorted({t.configuration for t in results.trials if t.configuration.startswith("dataloader_workers")}):
        runs = results.runs(configuration)
        if not runs or runs[0].knobs != ["dataloader_workers"]:
            continue
        workers = runs[0].config.num_workers
        gain = compare(runs, results.runs(base))
        if gain is None:
            continue
        rows.append(Row(workers=workers, configuration=configuration, estimated=loader_estimate(ctx, wait).gain_with(workers),
                        measured=gain))
    return sorted(rows, key=lambda r: r.workers)


def report(results: Results) -> bool:
    results.findings = run_rules(results)
    ranked, _ = partition_findings(results.findings)
    first = ranked[0] if ranked else None
    ranks_first = first is not None and first.rule_id == DataLoaderStall.id
    blind = copy.deepcopy(results)
    blind.sweep = None
    (estimate,) = [f for f in run_rules(blind) if f.rule_id == DataLoaderStall.id] or [None]
    base = baseline_run(results)  # the representative run the rule reads (contended runs are not)
    m = base.metrics if base else None
    env = results.environment
    print(f"{results.workload.name} on {env.device_name} ({env.device_type}); usable cores {env.cpu_cores_usable:g} "
          f"({env.cpu_cores_usable_how}); torch {env.torch_version}")
    if m is not None:
        profile = m.dataset_profile
        print(f"baseline ({base.name}, {len(results.runs(base.configuration))} runs): step {m.mean_step_time_s * 1e3:.1f} ms, "
              f"data wait {m.data_wait_share:.0%}"
              + (f"; Dataset profiled: batch {profile.batch_s * 1e3:.1f} ms on {profile.threads} threads, "
                 f"{profile.batch_one_thread_s * 1e3:.1f} ms on one (a worker)" if profile and profile.batch_one_thread_s else ""))
    print(f"first ranked finding: {first.rule_id + ' ' + first.title if first else '-'} -> {'PASS' if ranks_first else 'FAIL'}")
    if estimate is not None:
        print(f"the rule's estimate without the sweep: {estimate.estimated_gain and f'{estimate.estimated_gain:.2f}×' or 'none'}"
              f" ({estimate.estimate_method or estimate.title})")
    rows = estimate_vs_measured(results)
    print(f"\n{'workers':>7}  {'estimated':>9}  {'measured':>8}  {'99% interval':<16} {'runs':>4}  {'est/meas-1':>10}  within {TOLERANCE:.0%}")
    for r in rows:
        g = r.measured
        print(f"{r.workers:>7}  {r.estimated:>8.2f}×  {g.ratio:>7.2f}×  [{g.low:.2f}, {g.high:.2f}]{'':<3} {g.runs:>4}  {r.error:>+10.1%}  "
              f"{'PASS' if r.within else 'FAIL'}")
    ok = ranks_first and bool(rows) and all(r.within for r in rows)
    print(f"\n{'PASS' if ok else 'FAIL'}: the data-loader finding ranks first and every estimate is within {TOLERANCE:.0%} of the workers' measurement")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=EXAMPLE)
    parser.add_argument("--from", dest="source", type=Path, default=None, help="results.json of a finished analyze")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--max-runs", type=int, default=6)
    args = parser.parse_args()
    path = args.source
    if path is None:
        out = args.out or Path(tempfile.mkdtemp(prefix="perfscope-dl-estimate-"))
        cmd = [sys.executable, "-m", "perfscope", "analyze", str(args.example), "--device", "cpu", "--out", str(out),
               "--only", "dataloader_workers", "--max-runs", str(args.max_runs)]
        print("$", " ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
            return 1
        path = out / "results.json"
    return 0 if report(Results.load(path)) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Record the results the report's browser test renders: a real `analyze` of the quick start and of a data-bound
Dataset workload on this machine, trimmed to what a page needs, into tests/data/reports/.

    python benchmarks/record_report_fixtures.py              # both; a few minutes on a 2-core CPU
    python benchmarks/record_report_fixtures.py --from quick_start_cpu=/tmp/run/results.json [--rules]

Trimmed, not edited: every figure is the run's own; only bulk a page does not need is dropped (the per-op
fingerprint tables and utilization samples of runs that are neither the baseline's first run nor the
recommendation, per-step series beyond 60 steps), so the fixtures stay small. The results still load through
Results.load and say in their notes that they were trimmed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfscope.results import Results  # noqa: E402
from perfscope.results.roles import baseline_run, recommended_run  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "reports"
EXAMPLES = {"quick_start_cpu": ROOT / "examples" / "tiny_transformer.py", "data_bound_cpu": ROOT / "examples" / "cpu_heavy_dataset.py"}
MAX_SERIES = 60


def trim(results: Results) -> Results:
    keep = {t.name for t in (baseline_run(results), recommended_run(results)) if t is not None}
    for t in results.trials:
        m = t.metrics
        if m is None:
            continue
        m.step_times_s, m.step_data_wait_s, m.losses = m.step_times_s[:MAX_SERIES], m.step_data_wait_s[:MAX_SERIES], m.losses[:MAX_SERIES]
        if t.name in keep:
            continue
        if m.fingerprint is not None:
            m.fingerprint = None
            m.unavailable["fingerprint"] = "trimmed from this test fixture"
        if m.utilization is not None:
            m.utilization.samples = []
    results.notes.append("test fixture: recorded by benchmarks/record_report_fixtures.py, bulk a report does not need trimmed")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="sources", nargs="*", default=[], help="NAME=results.json of a finished run, instead of running it")
    parser.add_argument("--rules", action="store_true", help="re-run this perfscope's rules on a --from run recorded before they changed")
    args = parser.parse_args()
    sources = dict(s.split("=", 1) for s in args.sources)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, example in EXAMPLES.items():
        if sources and name not in sources:
            continue
        path = Path(sources[name]) if name in sources else None
        if path is None:
            out = Path(tempfile.mkdtemp(prefix=f"perfscope-{name}-"))
            cmd = [sys.executable, "-m", "perfscope", "analyze", str(example.relative_to(ROOT)), "--device", "cpu", "--out", str(out)]
            print("$", " ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
                return 1
            path = out / "results.json"
        results = trim(Results.load(path))
        if args.rules:
            from perfscope.rules import run_rules

            results.findings = run_rules(results)
        saved = results.save(FIXTURES / f"{name}.json")
        print(f"{saved}: {saved.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

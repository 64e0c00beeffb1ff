"""Capture small real CUDA traces through perfscope's own trial loop, as test fixtures for the trace facts.

    python benchmarks/capture_cuda_fixtures.py --out /tmp/fixtures      # on a GPU machine
    python benchmarks/capture_cuda_fixtures.py --out /tmp/f --device cpu --only mlp_fp32_pageable   # to try it

Each scenario runs a trial as a trial child does (`run_trial`, then `capture_trace`) on a tiny workload
in its own process and keeps the trace, `<scenario>/trace/rank0.json.gz` (perfscope.trace.export's name),
plus the facts perfscope computed from it and the trial's config (`<scenario>/facts.json`). Exit 1 when a
scenario wrote no trace (tests/test_capture_script.py runs it on CPU so it stays runnable). The scenarios cover the structures the trace analysis must handle on a GPU: the duplicated
ProfilerStep / perfscope::data annotations (CPU `user_annotation` and `gpu_user_annotation`), cuBLAS
`nvjet_*` and CUTLASS GEMMs, cuDNN convolutions, flash attention, Triton kernels from torch.compile,
pageable vs pinned memcpy, host syncs (`aten::item`), and a launch-bound deep narrow MLP.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS: dict[str, tuple[str, dict]] = {
    "mlp_fp32_pageable": ("tests/workloads/mlp.py", {"micro_batch_size": 8}),
    "mlp_pinned": ("tests/workloads/mlp.py", {"micro_batch_size": 8, "pin_memory": True}),
    "item_sync": ("tests/workloads/item_sync.py", {"micro_batch_size": 8}),
    "transformer_bf16": ("examples/tiny_transformer.py", {"micro_batch_size": 8, "precision": "bf16"}),
    "transformer_fp32": ("examples/tiny_transformer.py", {"micro_batch_size": 8}),
    "transformer_compiled": ("examples/tiny_transformer.py", {"micro_batch_size": 8, "precision": "bf16", "compile": "default"}),
    "convnet_bf16_channels_last": ("examples/small_convnet.py", {"micro_batch_size": 32, "precision": "bf16", "channels_last": True}),
    "convnet_fp32": ("examples/small_convnet.py", {"micro_batch_size": 32}),
    "misaligned_bf16": ("tests/workloads/misaligned_mlp.py", {"micro_batch_size": 256, "precision": "bf16"}),
    "launch_bound": ("tests/workloads/deep_narrow_mlp.py", {"micro_batch_size": 4}),
}


def run_one(name: str, out: Path, device: str = "cuda") -> None:
    from perfscope.results import to_jsonable
    from perfscope.results.config import TrialConfig
    from perfscope.trial.loop import capture_trace, run_trial
    from perfscope.workload import load_workload

    path, changes = SCENARIOS[name]
    workload = load_workload(ROOT / path)
    config = TrialConfig(device=device, steps=5, warmup_steps=3, capture_trace=True, count_flops=False, **changes)
    target = out / name
    run = run_trial(workload, config)
    capture_trace(run, config, target)  # writes target/trace/rank0.json.gz and fills metrics.trace_facts
    metrics = run.metrics
    facts = to_jsonable(metrics.trace_facts)  # None when no trace was captured (the reason is in unavailable)
    (target / "facts.json").write_text(json.dumps({"config": config.to_dict(), "workload": path, "facts": facts,
                                                   "trace": metrics.trace_path, "unavailable": metrics.unavailable},
                                                  indent=1, default=str))


def trace_of(scenario_dir: Path) -> Path | None:
    """The scenario's trace (trace/rank<R>.json.gz: one rank here), None when it wrote none."""
    return next(iter(sorted((scenario_dir / "trace").glob("rank*.json.gz"))), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cuda (the point); cpu to try the script")
    parser.add_argument("--only", default=None, help="comma-separated scenario names")
    args = parser.parse_args()
    if args.one:
        run_one(args.one, args.out, args.device)
        return 0
    names = args.only.split(",") if args.only else list(SCENARIOS)
    if unknown := [n for n in names if n not in SCENARIOS]:
        print(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    missing = []
    for name in names:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--device", args.device, "--one", name], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
        trace = trace_of(args.out / name)
        size = f"{trace.relative_to(args.out)} {trace.stat().st_size / 1e3:.0f} kB" if trace else "no trace"
        print(f"{name}: exit {proc.returncode}, {size}, {time.monotonic() - t0:.0f}s", flush=True)
        if proc.returncode != 0 or trace is None:
            missing.append(name)
            print(proc.stderr[-3000:], flush=True)
    shutil.rmtree(args.out / "__pycache__", ignore_errors=True)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())

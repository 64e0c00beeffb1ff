"""Chrome/Kineto trace → per-step facts (the contract is in perfscope/trace/__init__.py).

    facts = trace_facts(Path("trials/baseline/trace.json.gz"), device_type="cuda", steps=3)
    facts["gpu_idle_fraction"], facts["kernel_time_by_category"], facts["launch_bound"]

Only complete events (`ph: "X"`) inside the ProfilerStep#N spans count. Kernel names are classified by
perfscope.trace.categories; fp32 GEMMs are GEMM kernels whose name says they run on CUDA cores (sgemm,
`*_f32f32_f32f32_*`, `nvjet_sss_*`); a name that does not say (Triton templates) is not counted as fp32. Launch-bound is declared when a step launches many short
kernels (≥ 200 per step, median < 20 µs) and the host is busy at least as long as the GPU; on a CPU-only
run, its equivalent is a step of ≥ 200 aten ops with a median self time < 20 µs that spends at least half
of its op time in such tiny ops (dispatch-bound).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from perfscope.trace.categories import categorize, gemm_on_tensor_cores

SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::item", "aten::_local_scalar_dense")
RUNTIME_LAUNCH = re.compile(r"cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|cudaGraphLaunch", re.I)
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")  # leaves: linear/matmul decompose into these
DATA_LABEL = "perfscope::data"
LAUNCH_BOUND_KERNELS, LAUNCH_BOUND_MEDIAN_US = 200, 20.0


def _load(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _overlap(intervals: list[tuple[float, float]], spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e, se) - max(s, ss)) for s, e in intervals for ss, se in spans)


def _gaps(busy: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    gaps, cursor = [], start
    for s, e in sorted(busy):
        if s > cursor:
            gaps.append((cursor, min(s, end)))
        cursor = max(cursor, e)
    if cursor < end:
        gaps.append((cursor, end))
    return [(s, e) for s, e in gaps if e > s]


def _self_times(ops: list[dict[str, Any]]) -> dict[int, float]:
    """Self time of each cpu_op (duration minus direct children on the same thread), by index in ``ops``."""
    self_time = {i: float(e["dur"]) for i, e in enumerate(ops)}
    by_thread: dict[Any, list[int]] = defaultdict(list)
    for i, e in enumerate(ops):
        by_thread[e.get("tid")].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (ops[i]["ts"], -ops[i]["dur"]))
        stack: list[int] = []
        for i in indices:
            start = ops[i]["ts"]
            while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= start:
                stack.pop()
            if stack:
                self_time[stack[-1]] -= ops[i]["dur"]
            stack.append(i)
    return self_time


def _gemm_shapes(ops: list[dict[str, Any]], steps: int, self_time: dict[int, float]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, tuple[int, int, int], str], dict[str, Any]] = {}
    for i, e in enumerate(ops):
        if e["name"] not in GEMM_OPS:
            continue
        dims = (e.get("args") or {}).get("Input Dims") or []
        types = (e.get("args") or {}).get("Input type") or []
        mats = [(d, t) for d, t in zip(dims, types + [""] * len(dims)) if isinstance(d, list) and len(d) >= 2]
        if len(mats) < 2:
            continue
        (a, dtype), (b, _) = mats[0], mats[1]
        if e["name"] in ("aten::addmm", "aten::baddbmm") and len(mats) >= 3:  # (bias, mat1, mat2)
            (a, dtype), (b, _) = mats[1], mats[2]
        m, k, n = int(_prod(a[:-1])), int(a[-1]), int(b[-1])
        key = (e["name"], (m, k, n), str(dtype))
        g = groups.setdefault(key, {"op": e["name"], "shape": [m, k, n], "dtype": str(dtype), "count": 0, "time_s": 0.0})
        g["count"] += 1
        g["time_s"] += max(self_time.get(i, e["dur"]), e["dur"]) / 1e6
    rows = []
    for g in groups.values():
        multiple = 8 if any(t in g["dtype"].lower() for t in ("half", "bfloat16", "bf16", "fp16")) else 4
        g["misaligned"] = [name for name, v in zip("mkn", g["shape"]) if v % multiple]
        g["count"] = g["count"] / max(steps, 1)
        g["time_s"] = g["time_s"] / max(steps, 1)
        rows.append(g)
    return sorted(rows, key=lambda r: -r["time_s"])[:20]


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def trace_facts(trace_path: Path, *, device_type: str, steps: int) -> dict[str, Any]:
    events = _load(Path(trace_path))
    step_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    if step_spans:
        window = (step_spans[0][0], step_spans[-1][1])
        n_steps = len(step_spans)
    else:
        window = (min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events))
        n_steps = max(steps, 1)
    inside = [e for e in events if window[0] <= e["ts"] <= window[1]]
    step_us = sum(e - s for s, e in step_spans) / n_steps if step_spans else (window[1] - window[0]) / n_steps
    per_step = 1.0 / n_steps
    facts: dict[str, Any] = {"device_type": device_type, "steps": n_steps, "step_time_s": step_us / 1e6}

    data_spans = [(e["ts"], e["ts"] + e["dur"]) for e in inside if e.get("name") == DATA_LABEL]
    facts["data_wait_fraction"] = min(1.0, _union_length(data_spans) * per_step / step_us) if step_us else 0.0
    sync_events = [e for e in inside if e.get("name") in SYNC_NAMES]
    facts["sync_events_per_step"] = {k: v * per_step for k, v in Counter(e["name"] for e in sync_events).items()}
    facts["sync_fraction"] = min(1.0, _union_length([(e["ts"], e["ts"] + e["dur"]) for e in sync_events]) * per_step / step_us) if step_us else 0.0

    cpu_ops = [e for e in inside if e.get("cat") == "cpu_op"]
    self_time = _self_times(cpu_ops)
    facts["gemm_shapes"] = _gemm_shapes(cpu_ops, n_steps, self_time)

    kernels = [e for e in inside if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if device_type == "cuda" and kernels:
        _gpu_facts(facts, inside, kernels, data_spans, sync_events, step_spans or [window], step_us, per_step)
    else:
        by_cat: dict[str, float] = defaultdict(float)
        by_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for i, e in enumerate(cpu_ops):
            t = max(self_time[i], 0.0)
            by_cat[categorize(e["name"])] += t
            by_op[e["name"]][0] += t
            by_op[e["name"]][1] += 1
        facts["kernel_time_by_category"] = {k: v * per_step / 1e6 for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])}
        facts["top_kernels"] = [
            {"name": name, "time_s": t * per_step / 1e6, "count": c * per_step, "category": categorize(name)}
            for name, (t, c) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:15]
        ]
        facts["fp32_matmul_fraction"] = None
        # CPU equivalent of launch-bound: the step is many tiny aten ops, each paying dispatch overhead.
        aten = [max(self_time[i], 0.0) for i, e in enumerate(cpu_ops) if e["name"].startswith("aten::")]
        tiny = sum(t for t in aten if t < LAUNCH_BOUND_MEDIAN_US)
        facts["kernel_count_per_step"] = len(aten) * per_step
        facts["median_kernel_us"] = statistics.median(aten) if aten else None
        facts["tiny_op_time_fraction"] = tiny / sum(aten) if aten and sum(aten) else None
        facts["launch_bound"] = bool(
            facts["kernel_count_per_step"] >= LAUNCH_BOUND_KERNELS
            and (facts["median_kernel_us"] or 0) < LAUNCH_BOUND_MEDIAN_US
            and (facts["tiny_op_time_fraction"] or 0) >= 0.5  # most op time in tiny ops, not in a few big matmuls
        )
    facts["trace_bytes"] = Path(trace_path).stat().st_size
    return facts


def _gpu_facts(
    facts: dict[str, Any],
    inside: list[dict[str, Any]],
    kernels: list[dict[str, Any]],
    data_spans: list[tuple[float, float]],
    sync_events: list[dict[str, Any]],
    step_spans: list[tuple[float, float]],
    step_us: float,
    per_step: float,
) -> None:
    busy = [(e["ts"], e["ts"] + e["dur"]) for e in kernels]
    busy_us = _union_length(busy) * per_step
    facts["gpu_busy_fraction"] = min(1.0, busy_us / step_us) if step_us else None
    facts["gpu_idle_fraction"] = 1.0 - facts["gpu_busy_fraction"] if facts["gpu_busy_fraction"] is not None else None
    compute = [e for e in kernels if e.get("cat") == "kernel"]
    durations = [e["dur"] for e in compute]
    facts["kernel_count_per_step"] = len(compute) * per_step
    facts["median_kernel_us"] = statistics.median(durations) if durations else None
    runtime = [e for e in inside if e.get("cat") in ("cuda_runtime", "cuda_driver") and RUNTIME_LAUNCH.search(e.get("name", ""))]
    launch_us = sum(e["dur"] for e in runtime) * per_step
    facts["cpu_launch_time_per_step_s"] = launch_us / 1e6
    cpu_busy_us = _union_length([(e["ts"], e["ts"] + e["dur"]) for e in inside if e.get("cat") == "cpu_op"]) * per_step
    facts["launch_bound"] = bool(
        facts["kernel_count_per_step"] >= LAUNCH_BOUND_KERNELS
        and (facts["median_kernel_us"] or 0) < LAUNCH_BOUND_MEDIAN_US
        and cpu_busy_us >= busy_us
    )
    gaps = [g for s, e in step_spans for g in _gaps(busy, s, e)]
    sync_spans = [(e["ts"], e["ts"] + e["dur"]) for e in sync_events]
    data_idle = _overlap(gaps, data_spans) * per_step
    sync_idle = _overlap(gaps, sync_spans) * per_step
    idle_total = sum(e - s for s, e in gaps) * per_step
    rest = max(idle_total - data_idle - sync_idle, 0.0)
    facts["idle_breakdown"] = {
        "data_wait": data_idle / 1e6,
        "sync": sync_idle / 1e6,
        "launch_bound": rest / 1e6 if facts["launch_bound"] else 0.0,
        "other": 0.0 if facts["launch_bound"] else rest / 1e6,
    }
    pageable = [e for e in kernels if "Pageable" in e.get("name", "") and "HtoD" in e.get("name", "")]
    facts["pageable_memcpy"] = {
        "count": len(pageable) * per_step,
        "bytes": sum(float((e.get("args") or {}).get("bytes", 0)) for e in pageable) * per_step,
        "time_s": sum(e["dur"] for e in pageable) * per_step / 1e6,
    }
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in kernels:
        name = e.get("name", "")
        category = "memcpy" if e.get("cat") == "gpu_memcpy" else "memset" if e.get("cat") == "gpu_memset" else categorize(name)
        by_cat[category] += e["dur"]
        by_name[name][0] += e["dur"]
        by_name[name][1] += 1
    facts["kernel_time_by_category"] = {k: v * per_step / 1e6 for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])}
    facts["top_kernels"] = [
        {"name": name, "time_s": t * per_step / 1e6, "count": c * per_step, "category": categorize(name)}
        for name, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]
    ]
    gemm = [e for e in compute if categorize(e.get("name", "")) == "gemm"]
    gemm_us = sum(e["dur"] for e in gemm)
    fp32_us = sum(e["dur"] for e in gemm if gemm_on_tensor_cores(e.get("name", "")) is False)
    facts["fp32_matmul_fraction"] = fp32_us / gemm_us if gemm_us else None

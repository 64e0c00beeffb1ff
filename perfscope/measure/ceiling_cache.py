"""The CPU matmul ceiling, measured once per machine configuration and kept on disk.

    tflops, how = cached_ceiling(ceiling_key("fp32", cpu_model, cores), lambda: measure_matmul_tflops("cpu", "fp32"))
    # how: "measured on this machine at 2026-11-24T16:40:03+00:00, cached in ~/.cache/perfscope/matmul-ceilings.json"

Why: on a CPU the ceiling probe (fp32 and bf16 matmuls) took 0.5 s of every `Profiler.save()` — most of the
hooks' fixed cost on a short run (benchmarks/hook_overhead.py) and of every `analyze` trial. The ceiling is a
property of the machine, not of the run, so it is measured at most once per key: host, CPU model, usable cores,
torch's intra-op threads, torch version, dtype and this module's METHOD (bumped when the probe changes). The
report says where the figure came from (``how``), so a cached reading is never passed off as this run's.
GPUs are not cached: their probe takes milliseconds, and clocks, power caps and MIG slices change under the
same name. PERFSCOPE_CEILING_CACHE=0 (or ``enabled=False``) measures every time and leaves the file alone;
PERFSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/perfscope, else ~/.cache/perfscope, holds the file. A file that
cannot be read or parsed, or an entry that is not a positive finite number, is re-measured and rewritten
(atomically: perfscope.results.io); a cache that cannot be written only costs the next run a measurement.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

CACHE_ENV = "PERFSCOPE_CEILING_CACHE"
"""Set to 0 (or false/no/off) to measure the ceiling in every run without reading or writing the cache."""
DIR_ENV = "PERFSCOPE_CACHE_DIR"
FILE_NAME = "matmul-ceilings.json"
FORMAT = 1
METHOD = 1
"""perfscope.measure.peaks.measure_matmul_tflops's method; entries of another method are measured again."""


@dataclass(frozen=True)
class CeilingKey:
    """What the ceiling depends on: a change in any field means a new measurement."""

    dtype: str
    host: str
    cpu_model: str
    usable_cores: float | None
    threads: int
    torch_version: str
    method: int = METHOD

    def id(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def ceiling_key(dtype: str, cpu_model: str | None, usable_cores: float | None) -> CeilingKey:
    """The key for this process now (torch's current intra-op thread count: the probe runs with it)."""
    return CeilingKey(dtype=dtype, host=socket.gethostname(), cpu_model=cpu_model or "unknown",
                      usable_cores=usable_cores, threads=torch.get_num_threads(), torch_version=torch.__version__)


def cache_enabled() -> bool:
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_path() -> Path:
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV]) / FILE_NAME
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfscope" / FILE_NAME


def _entries(path: Path) -> dict[str, dict[str, object]]:
    """The file's entries; {} when it is missing, unreadable or not this format (it is then rewritten)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
        return {}
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict)}


def _valid(entry: dict[str, object] | None) -> tuple[float, str] | None:
    if entry is None:
        return None
    tflops, at = entry.get("tflops"), entry.get("measured_at")
    if isinstance(tflops, bool) or not isinstance(tflops, int | float) or not math.isfinite(tflops) or tflops <= 0:
        return None
    return (float(tflops), at) if isinstance(at, str) and at else None


def cached_ceiling(key: CeilingKey, measure: Callable[[], float], *, enabled: bool | None = None,
                   path: Path | None = None) -> tuple[float, str]:
    """(TFLOP/s, how it was obtained): the cached reading for ``key``, else ``measure()`` (then stored)."""
    if not (cache_enabled() if enabled is None else enabled):
        return measure(), "measured in this run (ceiling cache off)"
    path = path or cache_path()
    entries = _entries(path)
    hit = _valid(entries.get(key.id()))
    if hit is not None:
        return hit[0], f"measured on this machine at {hit[1]}, cached in {path}"
    tflops = measure()
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entries[key.id()] = {"tflops": tflops, "measured_at": at}
    try:
        from perfscope.results.io import write_json

        write_json(path, {"format": FORMAT, "entries": entries})
    except Exception as exc:  # noqa: BLE001 - a read-only home only costs the next run a measurement
        return tflops, f"measured in this run (not cached: {type(exc).__name__}: {exc})"
    return tflops, f"measured in this run at {at}, now cached in {path}"

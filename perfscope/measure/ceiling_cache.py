"""The CPU matmul ceiling, measured once per machine configuration and kept on disk.

Design notes: docs/measurement.md."""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch

from perfscope.cache_dir import DIR_ENV, cache_dir  # noqa: F401 - DIR_ENV re-exported for the tests
from perfscope.results.io import write_json

CACHE_ENV = "PERFSCOPE_CEILING_CACHE"
"""Set to 0 (or false/no/off) to measure the ceiling in every run without reading or writing the cache."""
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


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


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


@dataclass
class Ceilings:
    """TFLOP/s per dtype, why a dtype has none, and how the figures were obtained (one line for the report)."""

    tflops: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    how: str = ""


def cached_ceilings(keys: dict[str, CeilingKey], measure: Callable[[str], float], *, enabled: bool | None = None,
                    path: Path | None = None) -> Ceilings:
    """The cached reading of each dtype's key, else ``measure(dtype)``; new readings are stored in one write.

    A dtype whose probe raises gets its reason in ``errors`` and is not stored (it is tried again next run).
    """
    if enabled is None:
        enabled = os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    if not enabled:
        return measure_each(list(keys), measure, how="measured in this run (ceiling cache off)")
    out = Ceilings()
    path = path or cache_path()
    entries = _entries(path)
    cached_at: set[str] = set()
    fresh = []
    for dtype, key in keys.items():
        hit = _valid(entries.get(key.id()))
        if hit is not None:
            out.tflops[dtype] = hit[0]
            cached_at.add(hit[1])
        elif _probe(out, dtype, measure):
            fresh.append(dtype)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    hows = []
    if cached_at:
        names = [d for d in out.tflops if d not in fresh]
        hows.append(f"{_dtypes(names, keys)}measured on this machine at {', '.join(sorted(cached_at))}, cached in {path}")
    if fresh:
        for dtype in fresh:
            entries[keys[dtype].id()] = {"tflops": out.tflops[dtype], "measured_at": now}
        try:
            write_json(path, {"format": FORMAT, "entries": entries})
            stored = f"now cached in {path}"
        except Exception as exc:  # noqa: BLE001 - a read-only home only costs the next run a measurement
            stored = f"not cached: {type(exc).__name__}: {exc}"
        hows.append(f"{_dtypes(fresh, keys) if cached_at else ''}measured in this run at {now} ({stored})")
    out.how = "; ".join(hows)
    return out


def measure_each(dtypes: list[str], measure: Callable[[str], float], *, how: str = "measured in this run") -> Ceilings:
    """No cache: ``measure(dtype)`` for each dtype (a GPU's ceilings, or the cache switched off)."""
    out = Ceilings()
    for dtype in dtypes:
        _probe(out, dtype, measure)
    out.how = how if out.tflops else ""
    return out


def _probe(out: Ceilings, dtype: str, measure: Callable[[str], float]) -> bool:
    try:
        out.tflops[dtype] = measure(dtype)
        return True
    except Exception as exc:  # noqa: BLE001 - a dtype the device cannot run is not an error
        out.errors[dtype] = f"{type(exc).__name__}: {exc}"
        return False


def _dtypes(names: list[str], keys: dict[str, CeilingKey]) -> str:
    """"fp32: " when only some of the dtypes share this provenance; "" when all do."""
    return "" if len(names) == len(keys) else ", ".join(names) + ": "

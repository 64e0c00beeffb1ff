"""Read results written by an older perfscope: schema 1 -> schema 2, on the JSON, before typing.

    data = upgrade(json.loads(text))       # a schema-2 document, with a note saying what was recomputed

Schema 1 computed throughput, MFU and every gain from the *median* step, and treated the steps of one
process as independent evidence. Its per-step times were contiguous boundary-to-boundary intervals, so
their sum is the window's wall time: throughput and MFU are recomputed exactly as work / wall time. Its
sweep gains cannot be recomputed from runs (one run per configuration), so they are kept, marked
"undecided" unless they were significant, and the results carry a note saying so — the CI gate then has one
run per side and says it cannot separate a regression from run-to-run noise.
"""

from __future__ import annotations

import copy
from typing import Any

NOTE_V1 = (
    "read from a schema-1 file: throughput and MFU recomputed as work / wall time from its per-step times; "
    "its sweep gains came from median step times within single runs and are not comparable with run-based gains"
)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 document from a schema-1 or schema-2 one (others are returned untouched for the caller to refuse)."""
    if data.get("schema_version") != 1:
        return data
    out = copy.deepcopy(data)
    out["schema_version"] = 2
    peak = (out.get("peak") or {}).get("tflops")
    for i, trial in enumerate(out.get("trials") or []):
        if not isinstance(trial, dict):
            continue
        trial.setdefault("configuration", trial.get("name", ""))
        trial.setdefault("sequence", i)
        config = trial.get("config")
        if isinstance(config, dict):
            trial["config"], trial["unknown_settings"] = _config_v1(config)
        if isinstance(trial.get("metrics"), dict):
            trial["metrics"] = _metrics_v1(trial["metrics"], peak)
    sweep = out.get("sweep")
    if isinstance(sweep, dict):
        for key in ("recommended_gain",):
            if isinstance(sweep.get(key), dict):
                sweep[key] = _gain_v1(sweep[key])
        for knob in sweep.get("knobs") or []:
            if isinstance(knob, dict) and isinstance(knob.get("gain"), dict):
                knob["gain"] = _gain_v1(knob["gain"])
    for finding in out.get("findings") or []:
        if isinstance(finding, dict) and isinstance(finding.get("gain"), dict):
            finding["gain"] = _gain_v1(finding["gain"])
    out.setdefault("notes", []).append(NOTE_V1)
    return out


def _config_v1(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Hooks wrote partial configs in schema 1: fill the required fields and say which were not observed."""
    from perfscope.results.config import TrialConfig

    known = {f for f in TrialConfig.__dataclass_fields__}
    clean = {k: v for k, v in config.items() if k in known}
    unknown: list[str] = []
    if "micro_batch_size" not in clean:
        clean["micro_batch_size"] = 1
        unknown.append("micro_batch_size")
    unknown += [name for name in ("precision", "tf32", "num_workers", "pin_memory") if name not in config]
    return clean, unknown


def _number(value: Any) -> float | int | None:
    """A JSON number, else None: a hostile file's "samples_per_step": "x" must not become "x" * 200000."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _metrics_v1(m: dict[str, Any], peak_tflops: Any) -> dict[str, Any]:
    times = [t for t in m.get("step_times_s") or [] if _number(t) is not None]
    waits = [t for t in m.get("data_wait_s") or [] if _number(t) is not None]
    wall = float(sum(times))
    per_step = _number(m.get("samples_per_step")) or 0
    peak_tflops = _number(peak_tflops)
    samples = per_step * len(times)
    out = dict(m)
    out["typical_step"] = m.get("step_time_s")
    out.pop("step_time_s", None)
    out["step_data_wait_s"] = waits
    out.pop("data_wait_s", None)
    out.pop("data_wait_fraction", None)
    out["windows"] = [{"steps": len(times), "samples": samples, "wall_s": wall, "data_wait_s": float(sum(waits)),
                       "host_data_wait_s": float(sum(waits))}] if times else []
    out["wall_s"] = wall
    out["samples_per_s"] = samples / wall if wall > 0 else None
    out["data_wait_share"] = out["host_data_wait_share"] = (sum(waits) / wall) if wall > 0 else 0.0
    tokens = _number(m.get("tokens_per_s"))
    if tokens and _number(m.get("samples_per_s")) and out["samples_per_s"]:
        out["tokens_per_s"] = tokens / m["samples_per_s"] * out["samples_per_s"]
    flops = _number(m.get("flops_per_step"))
    if flops and wall > 0:
        out["achieved_tflops"] = flops * len(times) / wall / 1e12
        if peak_tflops:
            out["mfu"] = out["achieved_tflops"] / peak_tflops
            hw = _number(m.get("hardware_flops_per_step"))
            out["hfu"] = hw * len(times) / wall / 1e12 / peak_tflops if hw else None
        old_mfu, old_ceiling = _number(m.get("mfu")), _number(m.get("mfu_vs_measured_ceiling"))
        ratio = (old_ceiling or 0) / old_mfu if old_mfu else None
        if ratio and out.get("mfu"):
            out["mfu_vs_measured_ceiling"] = out["mfu"] * ratio
    return out


def _gain_v1(g: dict[str, Any]) -> dict[str, Any]:
    ratio = _number(g.get("ratio", 1.0)) or 0.0
    significant = bool(g.get("significant"))
    verdict = ("faster" if ratio > 1 else "slower") if significant else "undecided"
    return {k: v for k, v in g.items() if k != "significant"} | {
        "verdict": verdict, "runs": 1, "reference_runs": 1,
        "method": "schema 1: bootstrap of median step times within one run (not run-based)",
    }


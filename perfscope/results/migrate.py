"""Read results written by an older perfscope: schema 1, 2 or 3 -> schema 4, on the JSON, before typing.

    data = upgrade(json.loads(text))       # a schema-4 document, with a note saying what was recomputed

Design notes: docs/results.md.
"""

from __future__ import annotations

import copy
from typing import Any

from perfscope.results.config import TrialConfig
from perfscope.results.constraints import finite
from perfscope.results.messages import LEGACY, NUMERICS, legacy, msg

LATEST = 4
"""The schema upgrade() ends at: perfscope.results.model.SCHEMA_VERSION (tests/test_results.py holds them equal)."""
NOTE_V1 = msg("read_from_schema_1")


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-4 document from a schema-1, 2, 3 or 4 one (others are returned untouched for the caller to refuse).
    A document already at schema 4 is returned as it is: only older ones are walked, on one copy."""
    if data.get("schema_version") not in (1, 2, 3):
        return data
    data = copy.deepcopy(data)  # every step below works in place on this copy
    if data["schema_version"] == 1:
        _v1(data)
    if data["schema_version"] in (2, 3):
        # Schema 2 (and an early schema-3 file) wrote messages as prose: each becomes a "legacy" message, verbatim.
        _prose_to_messages(data)
        if data["schema_version"] == 2 and isinstance(data.get("warnings"), list):
            data["warnings"] = [_message(w, load=True) for w in data["warnings"]]
        # Schema 3 still wrote a knob's reason, a layout row's, the numerics guard's, FLOP notes, not_applied,
        # stopped_early, tp_inapplicable and a capture's note as prose; its three contended codes are one now.
        _upper_bounds(data)
        _typed_trace_facts(data)
        _reasons_to_messages(data)
        data["schema_version"] = LATEST
    return data


UPPER_BOUND_V2 = "upper bound"
"""How an upper-bound estimate's method began in prose, before Finding.upper_bound said so."""


def _upper_bounds(data: dict[str, Any]) -> None:
    """Findings written before Finding.upper_bound: a bound by the words of their estimate_method, in place."""
    for f in data["findings"] if isinstance(data.get("findings"), list) else []:
        if isinstance(f, dict) and "upper_bound" not in f:
            f["upper_bound"] = isinstance(f.get("estimate_method"), str) and f["estimate_method"].startswith(UPPER_BOUND_V2)


# ------------------------------------------------------------------------------ schema 2: prose messages

LOAD_WARNING_V2 = "other load on this machine persisted through"
"""How every persistent-load warning perfscope wrote as prose began: read back as the code "persistent_load_v2",
which a resumed session replaces like its own (perfscope.trial.session)."""
CONTENDED_V2 = "contended"
"""How every exclusion of a contended run began in prose: read back as the code "contended_v2" (results.CONTENDED)."""


NUMERICS_V2 = "numerics: "
"""How every numerics change began in prose (KnobOutcome.changes_semantics, Finding.caveats): read back as the code
"numerics" around the rest, kept verbatim, so perfscope.ranking still tells it from a recipe change."""


def _message(text: Any, load: bool = False, excluded: bool = False, semantics: bool = False) -> Any:
    """The JSON of the message holding an old prose string (anything else is left for the loader to judge)."""
    if not isinstance(text, str):
        return text
    if load and text.startswith(LOAD_WARNING_V2):
        m = msg("persistent_load_v2", text=text)
    elif excluded and text.startswith(CONTENDED_V2):
        m = msg("contended_v2", text=text)
    elif semantics and text.startswith(NUMERICS_V2):
        rest = legacy(text[len(NUMERICS_V2):])
        return {"code": NUMERICS, "params": {"change": {"code": rest.code, "params": dict(rest.params)}}}
    else:
        m = legacy(text)
    return {"code": m.code, "params": dict(m.params)}


def _prose_to_messages(node: Any) -> None:
    """Every `unavailable` map's reasons, every TrialMetrics' flags, a trial's exclusion, a window's contention, the
    semantics changes of a knob's outcome and a finding, and every list of notes that holds messages
    (_holds_messages), at any depth, in place; a value already a message is left as it is."""
    if isinstance(node, list):
        for value in node:
            _prose_to_messages(value)
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "unavailable" and isinstance(value, dict):
            node[key] = {k: _message(v) for k, v in value.items()}
        elif key in ("flags", "notes") and isinstance(value, list) and _holds_messages(node, key):
            node[key] = [_message(v) for v in value]
        elif key in ("changes_semantics", "caveats") and isinstance(value, list) and ("knob" in node or "rule_id" in node):
            node[key] = [_message(v, semantics=True) for v in value]
        elif (key == "excluded" and "status" in node) or (key == "reason" and "contended" in node):
            node[key] = _message(value, excluded=key == "excluded")
        else:
            _prose_to_messages(value)


def _holds_messages(node: dict[str, Any], key: str) -> bool:
    """Whether ``node[key]`` is a list of messages: a TrialMetrics' flags; the notes of the Results, the Sweep, a
    trace's facts (typed: a "kernels" object), a rank's communication, a parallel sweep, a model-parallel run's
    facts or the layout table."""
    if key == "flags":
        return "samples_per_s" in node
    return ("environment" in node or "baseline_trial" in node or isinstance(node.get("kernels"), dict)
            or "exposed_collective_s" in node or "executor" in node or "bubble_method" in node
            or ("world_size" in node and "rows" in node))


# ------------------------------------------------------------------------------ schema 3: prose reasons


def _reasons_to_messages(node: Any) -> None:
    """KnobOutcome.reason (a "knob" with a "status"), LayoutRow.reason (a "prune_reason"), NumericsCheck.reason (a
    "tolerance" and a "first_step") and TrialMetrics.flop_notes, at any depth, in place."""
    if isinstance(node, list):
        for value in node:
            _reasons_to_messages(value)
        return
    if not isinstance(node, dict):
        return
    reason = node.get("reason")
    if "knob" in node and "status" in node and "reason" in node:
        node["reason"] = [_message(reason)] if isinstance(reason, str) and reason else reason or []
    elif isinstance(reason, str) and ("prune_reason" in node or ("tolerance" in node and "first_step" in node)):
        node["reason"] = _message(reason)
    if isinstance(node.get("flop_notes"), list):
        node["flop_notes"] = [_message(n) for n in node["flop_notes"]]
    if "recommended_trial" in node and isinstance(node.get("stopped_early"), str):  # Sweep.stopped_early
        node["stopped_early"] = _message(node["stopped_early"])
    _capture_notes(node)
    for key in ("not_applied", "tp_inapplicable"):  # TrialMetrics.not_applied, ModelLayout.tp_inapplicable: -> why
        if isinstance(node.get(key), dict):
            node[key] = {k: _message(v) for k, v in node[key].items()}
    for key, value in node.items():
        if key not in ("reason", "flop_notes", "not_applied", "tp_inapplicable"):
            _reasons_to_messages(value)


_CONTENDED_V3 = {"contended_budget": ("budget", None), "contended_persisted": ("runs", "runs"),
                 "contended_given_up": ("gave_up_after", "measurements")}
"""Schema 3's ways a contended run ended, each its own code: schema 4's `contended` parameter, and its source."""


def _capture_notes(node: dict[str, Any]) -> None:
    """A trace capture's note, in place: schema 3 wrote it as prose, in a trial's "trace_not_captured" notes or as
    the hooks' "capture_said" message. Also a run's exclusion under one of schema 3's contended codes."""
    params = node.get("params")
    if not isinstance(params, dict):
        return
    if node.get("code") in _CONTENDED_V3:
        new, old = _CONTENDED_V3[node["code"]]
        node["code"], node["params"] = "contended", {"why": params.get("why", []),
                                                     new: True if old is None else params.get(old)}
    elif node.get("code") == "capture_said" and isinstance(params.get("note"), str):
        node["code"], node["params"] = LEGACY, {"text": params["note"]}
    elif node.get("code") == "trace_not_captured" and isinstance(params.get("notes"), list):
        params["notes"] = [_message(n) for n in params["notes"]]


def _v1(out: dict[str, Any]) -> None:
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
        if isinstance(sweep.get("recommended_gain"), dict):
            sweep["recommended_gain"] = _gain_v1(sweep["recommended_gain"])
        for knob in sweep.get("knobs") or []:
            if isinstance(knob, dict) and isinstance(knob.get("gain"), dict):
                knob["gain"] = _gain_v1(knob["gain"])
    for finding in out.get("findings") or []:
        if isinstance(finding, dict) and isinstance(finding.get("gain"), dict):
            finding["gain"] = _gain_v1(finding["gain"])
    out.setdefault("notes", []).append({"code": NOTE_V1.code, "params": {}})


def _config_v1(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Hooks wrote partial configs in schema 1: fill the required fields and say which were not observed."""
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


# ------------------------------------------------------------------------------ untyped trace facts

NOTE_TRACE_FACTS = msg("read_from_untyped_facts")


def _typed_trace_facts(data: dict[str, Any]) -> None:
    """Every trial's trace facts written as a free-form dict (not the typed shape, with "kernels"), typed in place."""
    for t in data.get("trials") or []:
        facts = t.get("metrics").get("trace_facts") if isinstance(t, dict) and isinstance(t.get("metrics"), dict) else None
        if isinstance(facts, dict) and not isinstance(facts.get("kernels"), dict):
            t["metrics"]["trace_facts"] = trace_facts_from_dict(facts)


def trace_facts_from_dict(old: dict[str, Any]) -> dict[str, Any]:
    """The typed shape (as JSON) of a free-form trace-facts dict; what it lacks gets the typed defaults."""
    def num(key: str) -> float | None:
        return finite(old.get(key))

    cuda = old.get("device_type") == "cuda" or num("gpu_idle_fraction") is not None
    out: dict[str, Any] = {
        "device_type": old.get("device_type") if isinstance(old.get("device_type"), str) else ("cuda" if cuda else "cpu"),
        "steps": int(num("steps") or 1),
        "step_time_s": num("step_time_s") or 0.0,
        "data_wait_fraction": num("data_wait_fraction") or 0.0,
        "kernels": {
            "source": "kernels" if cuda else "cpu ops",
            "time_by_category": _number_map(old.get("kernel_time_by_category")),
            "top": [
                {"name": str(k["name"]), "time_s": float(k["time_s"]), "count": finite(k.get("count")) or 0.0,
                 "category": str(k.get("category") or "other")}
                for k in _rows(old.get("top_kernels")) if "name" in k and finite(k.get("time_s")) is not None
            ],
            "fp32_gemm_fraction": num("fp32_matmul_fraction"),
        },
        "launch": {
            "launch_bound": old.get("launch_bound") is True,
            "kernels_per_step": num("kernel_count_per_step") or 0.0,
            "median_kernel_us": num("median_kernel_us"),
            "host_launch_s": num("cpu_launch_time_per_step_s"),
            "tiny_op_time_fraction": num("tiny_op_time_fraction"),
        },
        "sync": {
            # nested calls were listed apiece; the largest count is the closest to the number of sync points
            "points_per_step": max(_number_map(old.get("sync_events_per_step")).values(), default=0.0),
            "events_per_step": _number_map(old.get("sync_events_per_step")),
            "blocked_fraction": num("sync_fraction") or 0.0,
        },
        "gemm_shapes": [
            {"op": str(g.get("op", "")), "shape": [int(v) for v in g["shape"]], "dtype": str(g.get("dtype", "")),
             "count": finite(g.get("count")) or 0.0, "time_s": finite(g.get("time_s")) or 0.0, "time_source": "cpu op",
             "misaligned": [str(d) for d in g.get("misaligned") or []]}
            for g in _rows(old.get("gemm_shapes")) if _int_list(g.get("shape"))
        ],
        "gemm_alignment": [
            {"shape": [int(v) for v in r["shape"]], "padded": [int(v) for v in r["padded"]], "dtype": str(r.get("dtype", "")),
             "time_s": float(r["time_s"]), "padded_time_s": float(r["padded_time_s"]), "speedup_per_flop": float(r["speedup_per_flop"])}
            for r in _rows(old.get("gemm_alignment"))
            if _int_list(r.get("shape")) and _int_list(r.get("padded"))
            and all(finite(r.get(k)) is not None for k in ("time_s", "padded_time_s", "speedup_per_flop"))
        ],
        "trace_bytes": int(num("trace_bytes")) if num("trace_bytes") is not None else None,
        "notes": [{"code": NOTE_TRACE_FACTS.code, "params": {}}],
    }
    busy, idle = num("gpu_busy_fraction"), num("gpu_idle_fraction")
    if busy is not None or idle is not None:
        busy = busy if busy is not None else 1.0 - (idle or 0.0)
        breakdown = _number_map(old.get("idle_breakdown"))
        out["gpu"] = {
            "busy_fraction": busy, "idle_fraction": idle if idle is not None else 1.0 - busy,
            "busy_s": busy * out["step_time_s"],
            "idle": {"data_wait_s": breakdown.get("data_wait", 0.0), "sync_s": breakdown.get("sync", 0.0),
                     "host_s": breakdown.get("launch_bound", 0.0), "other_s": breakdown.get("other", 0.0)},
        }
    copies = _number_map(old.get("pageable_memcpy"))
    if copies:
        out["pageable_memcpy"] = {"count": copies.get("count", 0.0), "bytes": copies.get("bytes", 0.0), "time_s": copies.get("time_s", 0.0)}
    return out


def _number_map(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(k): f for k, v in value.items() if (f := finite(v)) is not None and f >= 0}


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)

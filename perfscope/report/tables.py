"""The report's tables: knobs (in the ranking's order, with what each changed in the step), trials, failures, top
kernels, the trace diff, environment, workload and the trace links.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from perfscope.ranking import Ranking
from perfscope.report import facts
from perfscope.report.format import (
    NA,
    Cell,
    Row,
    Table,
    fmt_bytes,
    fmt_count,
    fmt_interval,
    fmt_percent,
    fmt_rate,
    fmt_seconds,
    gain_text,
)
from perfscope.report.headline import step_cell
from perfscope.report.structure import StructuralEffect
from perfscope.results import FAILED_STATUSES, KnobOutcome, Results, Trial, TrialMetrics
from perfscope.results.trace_facts import diff_facts
from perfscope.wording import joined, words

MAX_KERNEL_ROWS = 15
MAX_KERNEL_NAME = 160


@dataclass(kw_only=True, slots=True)
class KnobRow:
    knob: str
    title: str
    status: str
    gain: str
    interval: str
    significant: bool | None
    setting: str  # the winning value, shown next to the gain
    reference: str  # what the gain is measured against (runs)
    mfu: str
    semantics: list[str]
    reason: str
    trial: str
    structure: list[str] = field(default_factory=list)  # what it changed in the step, counted (perfscope.report.structure)
    structure_notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class FailureView:
    name: str
    status: str
    knobs: str
    error: str


@dataclass(kw_only=True, slots=True)
class TraceLink:
    trial: str
    href: str
    label: str


def _knob_list(knobs: list[str]) -> str:
    return " + ".join(knobs) if knobs else "—"


def knob_rows(ranking: Ranking, knobs: list[KnobOutcome], effects: dict[str, StructuralEffect]) -> list[KnobRow]:
    """The knobs in the order given (perfscope.ranking), with the gain the headline and the ranked fixes show for
    each (`Ranking.gain`) and what it changed in the step (perfscope.report.structure)."""
    rows = []
    for k in knobs:
        g = ranking.gain(k)
        effect = effects.get(k.trial or "")
        rows.append(KnobRow(
            knob=k.knob, title=k.title, status=k.status, gain=gain_text(g.ratio) if g else "—",
            interval=fmt_interval(g.low, g.high) if g else "", significant=g.significant if g else None,
            setting=k.setting or "", reference=f"vs {g.reference} ({g.runs} : {g.reference_runs} runs)" if g else "",
            mfu=fmt_percent(k.mfu) if k.mfu is not None else "—", semantics=[words(s) for s in k.changes_semantics],
            reason=joined(k.reason), trial=k.trial or "", structure=effect.lines() if effect else [],
            structure_notes=[words(n) for n in effect.notes if effect.compared] if effect else [],
        ))
    return rows


def trial_rows(results: Results, base: str | None, rec: str | None) -> Table:
    """Every run, the baseline's and the recommendation's tagged and marked."""
    table = Table(header=["Trial", "Status", "Knobs", "Micro × accum", "Step time", "Throughput", "MFU", "Peak memory", "Wall time"],
                  align="lllrrrrrr")
    for t in results.trials:
        m = t.metrics
        role = "baseline" if t.name == base else "recommended" if t.name == rec else ""
        name = Cell(text=t.name, code=True, tags=[role] if role else [])
        status = Cell(text=t.status + (f" · not applied: {', '.join(m.not_applied)}" if m and m.not_applied else ""),
                      style=f"status status-{t.status}")
        wall_time = fmt_seconds(t.wall_time_s) if t.wall_time_s else "—"
        if m is None:
            table.add(name, status, _knob_list(t.knobs), str(t.config.micro_batch_size), "—", "—", "—", "—", wall_time,
                      mark=f"role-{role or 'none'}")
            continue
        throughput = fmt_rate(m.tokens_per_s, "tokens/s") if m.tokens_per_s is not None else fmt_rate(m.samples_per_s, "samples/s")
        table.add(name, status, _knob_list(t.knobs), _batch(results, m), step_cell(t), throughput,
                  fmt_percent(m.mfu) if m.mfu is not None else NA, fmt_bytes(m.peak_memory_bytes), wall_time, mark=f"role-{role or 'none'}")
    return table


def _batch(results: Results, m: TrialMetrics) -> str:
    """micro-batch × accumulation; "unknown" for a trace the user brought, which records no batch (0)."""
    if results.source == "trace" and m.micro_batch_size == 0:
        return "unknown (not in a trace)"
    return f"{m.micro_batch_size} × {m.grad_accum_steps}"


def failures(results: Results) -> list[FailureView]:
    return [
        FailureView(name=t.name, status=t.status, knobs=_knob_list(t.knobs), error=(t.error or "").strip() or "(no error text recorded)")
        for t in results.trials
        if t.status in FAILED_STATUSES or t.status == "skipped"
    ]


def kernels(results: Results, names: list[str | None]) -> tuple[Table, str]:
    """The longest kernels of the first of ``names`` (else of any run) with a trace, and that run's name."""
    table = Table(header=["Kernel", "Time", "Calls", "Share"], align="lrrr")
    for t in [results.trial(n) for n in names if n] + results.ok_trials():
        kernels = facts.top_kernels(t.metrics.trace_facts) if t is not None and t.metrics is not None else []
        if not kernels:
            continue
        total = sum(facts.kernel_time_by_category(t.metrics.trace_facts).values()) or sum(k.time_s for k in kernels)  # type: ignore[union-attr]
        for k in kernels[:MAX_KERNEL_ROWS]:
            name = k.name if len(k.name) <= MAX_KERNEL_NAME else k.name[: MAX_KERNEL_NAME - 1] + "…"
            count = (f"{k.count:.0f}" if k.count >= 10 or k.count == int(k.count) else f"{k.count:.1f}") if k.count is not None else "—"
            table.add(Cell(text=name, title=k.name, code=True), fmt_seconds(k.time_s), count,
                      fmt_percent(k.time_s / total) if total else "—")
        return table, t.name  # type: ignore[union-attr]
    return table, ""


def _cores(physical: int | None, logical: int | None) -> str:
    if physical and logical:
        return f" ({physical} physical / {logical} logical cores)"
    return f" ({logical} logical cores)" if logical else ""


def environment(results: Results) -> list[Row]:
    env = results.environment
    rows = [
        Row(label="Device", value=f"{env.device_name} ({env.device_type}" + (f" × {env.device_count})" if env.device_count > 1 else ")")),
        Row(label="Compute capability", value=env.compute_capability or ""),
        Row(label="Device memory", value=fmt_bytes(env.device_memory_bytes) if env.device_memory_bytes else ""),
        Row(label="Driver / CUDA", value=" / ".join(v for v in (env.driver_version, env.cuda_version) if v)),
        Row(label="PyTorch", value=env.torch_version),
        Row(label="Python", value=env.python_version),
        Row(label="Platform", value=env.platform),
        Row(label="CPU", value=(env.cpu_model or "") + _cores(env.cpu_cores_physical, env.cpu_cores_logical)),
        Row(label="Host memory", value=fmt_bytes(env.host_memory_bytes) if env.host_memory_bytes else ""),
        Row(label="Host", value=env.hostname),
        Row(label="Datasheet peaks", value=", ".join(f"{k} {v:g} TFLOP/s" for k, v in env.datasheet_peaks_tflops.items())),
        Row(label="Datasheet", value=env.datasheet_source or ""),
        Row(label="Measured matmul ceiling", value=", ".join(f"{k} {v:g} TFLOP/s" for k, v in env.measured_ceiling_tflops.items())
            + (f" ({env.measured_ceiling_how})" if env.measured_ceiling_tflops and env.measured_ceiling_how else "")),
    ]
    rows += [Row(label=f"{k} (unavailable)", value=words(v)) for k, v in env.unavailable.items()]
    return [r for r in rows if r.value.strip()]


def workload(results: Results) -> list[Row]:
    w = results.workload
    rows = [
        Row(label="Name", value=w.name),
        Row(label="File", value=w.path),
        Row(label="SHA-256", value=w.sha256[:16] + "…" if len(w.sha256) > 16 else w.sha256),
        Row(label="Parameters", value=fmt_count(w.parameter_count) if w.parameter_count else ""),
    ]
    rows += [Row(label=str(k), value=str(v)) for k, v in w.declared.items()]
    return [r for r in rows if r.value.strip()]


def _from_report(trace_path: str, report_dir: Path | None) -> str:
    """The trace's path as seen from the report's folder (an absolute path made relative when it can be)."""
    path = Path(trace_path)
    if path.is_absolute() and report_dir is not None:
        try:
            path = Path(os.path.relpath(path, report_dir))
        except ValueError:  # another drive on Windows: keep the absolute path
            pass
    return path.as_posix()


def trace_href(trace_path: str, report_dir: Path | None) -> str:
    """A relative, percent-encoded link: no scheme can survive it (``javascript:`` becomes a file name)."""
    posix = PurePosixPath(_from_report(trace_path, report_dir))
    if posix.is_absolute():
        return "file://" + quote(str(posix))
    return quote(str(posix), safe="/") if str(posix) else ""


def traces(results: Results, report_dir: Path | None) -> list[TraceLink]:
    return [
        TraceLink(trial=t.name, href=trace_href(t.metrics.trace_path, report_dir), label=_from_report(t.metrics.trace_path, report_dir)
                  + (f" ({fmt_bytes(t.metrics.trace_facts.trace_bytes)})" if t.metrics.trace_facts and t.metrics.trace_facts.trace_bytes else ""))
        for t in results.trials
        if t.metrics and t.metrics.trace_path
    ]


def trace_diff(base: Trial | None, rec: Trial | None) -> Table:
    """Where the time went between the baseline and the recommendation, per step (both must have a trace)."""
    table = Table(header=["Kernel category", "Baseline / step", "Recommended / step", "Change"], align="lrrr")
    if base is None or rec is None or base is rec or not (base.metrics and rec.metrics):
        return table
    if not (base.metrics.trace_facts and rec.metrics.trace_facts):
        return table
    diff = diff_facts(base.metrics.trace_facts, rec.metrics.trace_facts)
    for c, d in diff.kernel_time_by_category.items():
        table.add(c, f"{d.baseline * 1e3:.2f} ms", f"{d.other * 1e3:.2f} ms", f"{d.delta * 1e3:+.2f} ms")
    if (d := diff.scalars.get("gpu_idle_fraction")) is not None:
        table.add("GPU idle (share of step)", f"{d.baseline:.1%}", f"{d.other:.1%}", f"{d.delta * 100:+.1f} pts")
    if (d := diff.scalars.get("kernel_count_per_step")) is not None:
        table.add("kernels (ops) per step", f"{d.baseline:.0f}", f"{d.other:.0f}", f"{d.delta:+.0f}")
    return table


def recommended_structure(results: Results, effects: dict[str, StructuralEffect]) -> list[str]:
    """What a stacked recommendation changed (a single knob's shows in its own row)."""
    sweep = results.sweep
    rec = sweep.recommended_trial if sweep else None
    if sweep is None or rec is None or rec not in effects or any(k.trial == rec for k in sweep.knobs):
        return []
    return effects[rec].lines()


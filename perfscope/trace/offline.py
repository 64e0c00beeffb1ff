"""A trace the user already has → a Results object (source "trace"): the diagnosis with no rerun.

Design notes: docs/trace.md."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime, timezone
from pathlib import Path

from perfscope._version import __version__
from perfscope.errors import UserError
from perfscope.hardware import datasheet_peak, is_mig_name, slice_peak
from perfscope.results import Environment, Results, Trial, TrialConfig, TrialMetrics, Window, WorkloadInfo
from perfscope.results.distributed import CommunicationFacts, DistributedFacts, RankMetrics, Straggler
from perfscope.results.messages import Message, msg
from perfscope.results.trace_facts import TraceFacts
from perfscope.stats import STRAGGLER_MIN_STEPS as MIN_STEPS
from perfscope.stats import STRAGGLER_TEST, slower_ranks, summarize
from perfscope.trace.communication import communication_facts, exposed_collective_by_step
from perfscope.trace.events import paused_gc
from perfscope.trace.facts import DATA_LABEL, trace_facts
from perfscope.trace.inputs import RankTrace, assign_ranks, load_rank, trace_files
from perfscope.trace.window import labelled, loader_spans

TRIAL = "baseline"
NO_SAMPLES = msg("trace_no_samples")
NO_FLOPS = msg("trace_no_flops")


@dataclasses.dataclass(kw_only=True)
class RankAnalysis:
    """One rank's trace, analysed."""

    source: RankTrace
    facts: TraceFacts
    communication: CommunicationFacts | None
    own_work_s: list[float]
    """Per traced step: the step minus its exposed collective time (perfscope.trace.offline.trace_stragglers)."""
    device_type: str
    world_size: int
    """What the rank was analysed as (the job's device type and world size, as known when it was read)."""
    data_labelled: bool
    """The trace has perfscope::data spans."""


def trace_results(path: Path, *, steps: int | None = None, command: list[str] | None = None) -> Results:
    """The Results of the trace(s) at ``path``; UserError (exit 2) on anything that is not a usable Kineto trace."""
    files = trace_files(path)
    analysed: list[RankAnalysis] = []
    for file in files:
        rank = load_rank(file)
        analysed.append(_analyse(rank, device_type=_device_type([a.source for a in analysed] + [rank]),
                                 steps=steps or 1, world_size=_world_size(len(files), [a.source for a in analysed] + [rank])))
    ranks = assign_ranks(path, [a.source for a in analysed])
    device_type, world_size = _device_type(ranks), _world_size(len(files), ranks)
    for i, a in enumerate(analysed):
        if (a.device_type, a.world_size) != (device_type, world_size):
            again = load_rank(a.source.path)
            again.rank, again.rank_from = a.source.rank, a.source.rank_from
            analysed[i] = _analyse(again, device_type=device_type, steps=steps or 1, world_size=world_size)
        if analysed[i].communication is not None:
            analysed[i].communication.rank = analysed[i].source.rank  # type: ignore[union-attr]
    analysed.sort(key=lambda a: a.source.rank)
    ranks = [a.source for a in analysed]
    first = analysed[0]
    metrics = _metrics(first)
    notes: list[Message] = []
    if world_size > 1:
        metrics.distributed = _distributed(analysed, world_size=world_size)
        notes.append(msg("ranks_traced", traced=len(ranks), world=world_size))
    guessed = [r.path.name for r in ranks if r.rank_from == "file order"]
    if len(ranks) > 1 and guessed:
        notes.append(msg("rank_from_file_order", files=guessed))
    notes += [msg("rank_note", rank=a.source.rank, note=note) for a in analysed for note in a.facts.notes]
    trial = Trial(name=TRIAL, configuration=TRIAL, sequence=1, config=TrialConfig(device=device_type, micro_batch_size=1),
                  unknown_settings=[f.name for f in dataclasses.fields(TrialConfig) if f.name != "device"],
                  status="ok", metrics=metrics)
    return Results(
        perfscope_version=__version__, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), source="trace",
        command=command or [], environment=_environment(ranks, device_type), workload=_workload(path, ranks),
        trials=[trial], notes=notes,
    )


def _device_type(ranks: list[RankTrace]) -> str:
    return "cuda" if any(r.device_type == "cuda" for r in ranks) else "cpu"


def _world_size(files: int, ranks: list[RankTrace]) -> int:
    return max([files, *(r.world_size for r in ranks if r.world_size is not None)])


def _analyse(r: RankTrace, *, device_type: str, steps: int, world_size: int) -> RankAnalysis:
    trace = r.trace
    assert trace is not None, "a rank is analysed while its events are held"
    try:
        with paused_gc():  # the analyzers make millions of spans too
            facts = trace_facts(r.path, device_type=device_type, steps=steps, trace=trace)  # streamed once, by inputs.py
            comm = None
            own: list[float] = []
            if world_size > 1:
                comm = communication_facts(r.path, rank=r.rank, device_type=device_type, steps=steps,
                                           world_size=world_size, trace=trace)
                exposed = exposed_collective_by_step(trace, device_type=device_type)
                own = [max(0.0, step - wait) for step, wait in zip(r.step_times_s, exposed)]
    except ValueError as exc:  # the window the analyzers read has no duration, no events
        raise UserError(f"{r.path}: not a usable trace: {exc}") from None
    r.trace = None  # released: only the summaries are kept across ranks
    return RankAnalysis(source=r, facts=facts, communication=comm, own_work_s=own, device_type=device_type,
                        world_size=world_size, data_labelled=bool(labelled(trace, DATA_LABEL) or loader_spans(trace)))


def _metrics(a: RankAnalysis) -> TrialMetrics:
    """The trial's figures: the rank's traced steps; what a trace cannot tell is None with the reason."""
    facts, times = a.facts, a.source.step_times_s
    wall = facts.step_time_s * facts.steps
    unavailable = {
        "samples_per_s": NO_SAMPLES, "tokens_per_s": NO_SAMPLES, "flops_per_step": NO_FLOPS, "achieved_tflops": NO_FLOPS,
        "mfu": NO_FLOPS, "hfu": NO_FLOPS,
        "peak_memory_bytes": msg("trace_no_memory"), "utilization": msg("trace_no_utilization"),
        "micro_batch_size": msg("trace_no_batch"), "grad_accum_steps": msg("trace_no_accumulation"),
    }
    if not a.data_labelled:
        unavailable["data_wait_share"] = msg("trace_no_data_spans", label=DATA_LABEL)
    if not times:
        unavailable["step_times_s"] = msg("trace_no_step_marks", steps=facts.steps)
    return TrialMetrics(
        steps=facts.steps, warmup_steps=0, micro_batch_size=0, grad_accum_steps=0, samples_per_step=0,
        windows=[Window(steps=facts.steps, samples=None, wall_s=wall, data_wait_s=facts.data_wait_fraction * wall,
                        host_data_wait_s=facts.data_wait_fraction * wall)],
        samples_per_s=None, wall_s=wall, data_wait_share=facts.data_wait_fraction,
        host_data_wait_share=facts.data_wait_fraction, step_times_s=times,
        typical_step=summarize(times) if times else None,
        calibration=f"{facts.steps} traced step(s) ({a.source.steps_from or 'the whole trace, --steps'})",
        trace_path=str(a.source.path.resolve()), trace_facts=facts, unavailable=unavailable,
    )


def _distributed(analysed: list[RankAnalysis], *, world_size: int) -> DistributedFacts:
    ranks = [_rank_metrics(a) for a in analysed]
    slowest = max(analysed, key=lambda a: a.facts.step_time_s)
    stragglers, method = trace_stragglers({a.source.rank: a.own_work_s for a in analysed})
    backends = sorted({a.source.backend for a in analysed if a.source.backend})
    return DistributedFacts(
        world_size=world_size, nnodes=len({a.source.host_name for a in analysed}) or 1, nproc_per_node=1,
        backend="/".join(backends), data_parallel="unknown", slowest_rank=slowest.source.rank, ranks=ranks,
        stragglers=stragglers, straggler_method=method, communication=slowest.communication,
        unavailable={
            "nnodes": msg("trace_no_layout"), "data_parallel": msg("trace_no_wrapping"),
            "job_samples_per_s": NO_SAMPLES, "global_batch": NO_SAMPLES,
        },
    )


def _rank_metrics(a: RankAnalysis) -> RankMetrics:
    facts, comm = a.facts, a.communication
    return RankMetrics(
        rank=a.source.rank, node=a.source.host_name, steps=facts.steps, wall_s=facts.step_time_s * facts.steps,
        step_times_s=a.source.step_times_s, data_wait_share=facts.data_wait_fraction,
        collective_s_per_step=comm.collective_s if comm else None,
        exposed_collective_s_per_step=comm.exposed_collective_s if comm else None,
        unavailable={"samples_per_s": NO_SAMPLES, "local_step_times_s": msg("trace_no_local_window"),
                     "peak_memory_bytes": msg("trace_no_rank_memory")},
    )


def _environment(ranks: list[RankTrace], device_type: str) -> Environment:
    """The device the trace names (deviceProperties) and its datasheet peaks, so facts can be read against it."""
    unavailable = {"torch_version": msg("trace_not_recorded"), "cpu_model": msg("trace_not_recorded")}
    names = sorted({r.device_name for r in ranks if r.device_name})
    props = next((r.device_properties for r in ranks if r.device_properties), {})
    name = " / ".join(names) or ("CPU" if device_type == "cpu" else "unknown GPU")
    env = Environment(device_type=device_type, device_name=name,
                      device_count=len(ranks) if device_type == "cuda" else 0,
                      hostname=", ".join(sorted({r.host_name for r in ranks if r.host_name})), unavailable=unavailable)
    if device_type == "cuda" and not names:
        unavailable["device_name"] = msg("trace_no_device_properties")
    if {"computeMajor", "computeMinor"} <= props.keys():
        env.compute_capability = f"{props['computeMajor']}.{props['computeMinor']}"
    if isinstance(props.get("totalGlobalMem"), int):
        env.device_memory_bytes = props["totalGlobalMem"]
    if isinstance(props.get("numSms"), int):
        env.multiprocessor_count = props["numSms"]
    peak = datasheet_peak(names[0]) if len(names) == 1 else None
    if peak is not None:
        sliced, why = slice_peak(peak, env.multiprocessor_count, mig=is_mig_name(names[0]))
        if sliced is not None:
            env.datasheet_peaks_tflops, env.datasheet_source = dict(sliced.tflops), sliced.source
        else:
            unavailable["datasheet_peaks_tflops"] = why or msg("no_datasheet_peak")
    elif device_type == "cuda":
        unavailable["datasheet_peaks_tflops"] = msg("trace_no_datasheet_entry") if names else msg("trace_device_unknown")
    return env


def _workload(path: Path, ranks: list[RankTrace]) -> WorkloadInfo:
    """The trace(s) stand for the workload: their content hash tells one set of traces from another."""
    digest = hashlib.sha256()
    for r in ranks:
        with open(r.path, "rb") as fh:  # in blocks: a trace can be gigabytes
            while block := fh.read(1 << 20):
                digest.update(block)
    name = path.name.removesuffix(".gz").removesuffix(".json").removesuffix(".pt.trace") or "trace"
    return WorkloadInfo(path=str(path), sha256=digest.hexdigest(), name=name,
                        declared={"traces": [f"rank {r.rank}: {r.path.name}" for r in ranks]})


OWN_WORK = "traced step minus its exposed collective time (its own work: the time it did not wait for the network or a peer)"


def trace_stragglers(own_work_s: dict[int, list[float]]) -> tuple[list[Straggler], str]:
    """(stragglers, the method in words) from each rank's own work per traced step (seconds, step order)."""
    tested = {rank: times for rank, times in own_work_s.items() if len(times) >= MIN_STEPS}
    if len(tested) < 2:
        counts = ", ".join(f"rank {r}: {len(t)}" for r, t in sorted(own_work_s.items()))
        return [], (f"not tested: it takes two ranks with at least {MIN_STEPS} traced steps each (ProfilerStep#N spans; "
                    f"{counts or 'no rank'})")
    found = slower_ranks(tested)
    steps = min(len(t) for t in tested.values())
    method = (f"each rank's mean {OWN_WORK} {STRAGGLER_TEST}; {len(tested)} ranks, {steps} traced steps each — few "
              "steps, so only a large, steady gap is named")
    unknown = ("from a trace alone the cause cannot be told (no GC, data-loader or host-load measurement): "
               "`perfscope analyze` measures them")
    return [Straggler(rank=rank, slower_by=t.slower_by, slowest_share=t.slowest_share, cause="unknown",
                      evidence=[*t.evidence(rank, OWN_WORK, "traced steps"), unknown]) for rank, t in found.items()], method


__all__ = ["trace_results", "trace_stragglers"]

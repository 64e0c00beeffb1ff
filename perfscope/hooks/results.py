"""The hooks' Results: what a Profiler observed, as a RunObservation, built by the one measurement core.

    results = build_results(prof, ratios=True)    # prof.results() calls this

Design notes: docs/hooks.md.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import perfscope.hooks.observe as observe
from perfscope._version import __version__
from perfscope.hooks.distributed import data_parallel_of, ddp_settings, layout
from perfscope.hooks.tally import most_common
from perfscope.knobs import Loop, observe_loop
from perfscope.measure import memory
from perfscope.measure.build import attach_trace, build_trial_metrics
from perfscope.measure.environment import collect_environment
from perfscope.measure.mfu import apply_utilization_ratios, choose_peak
from perfscope.measure.observation import FirstStep, MemoryPeaks, RunObservation, Unavailable
from perfscope.measure.utilization import current_cuda_index
from perfscope.results import Results, Trial, TrialConfig, WorkloadInfo
from perfscope.results.messages import msg
from perfscope.tf32_api import matmul_tf32
from perfscope.wording import words
from perfscope.workload import file_sha256

if TYPE_CHECKING:
    from perfscope.hooks.state import ProfilerState
    from perfscope.results import Environment

CUDA_PEAKS_SINCE_START = msg("cuda_peaks_since_start")
LOSSES_NOT_READ = msg("hooks_losses_not_read")
WINDOW_SYNCS_NOT_COUNTED = msg("hooks_window_syncs_not_counted")


def memory_peaks(device: torch.device) -> MemoryPeaks:
    """Peaks since the process started: resetting them would change what the user's own code reads."""
    rss = memory.process_peak_rss_bytes()
    if device.type != "cuda":
        return MemoryPeaks(device_type=device.type, host_rss=rss)
    index = cuda_index(device)
    allocated, reserved = memory.device_peaks("cuda", index)
    return MemoryPeaks(device_type="cuda", allocated=allocated, reserved=reserved,
                       capacity=memory.device_capacity("cuda", index), scope="since the process started", host_rss=rss)


def environment(prof: ProfilerState) -> Environment:
    """Read after the memory peaks (the ceiling probe allocates), on the profiler's own device; once (the profiler
    keeps the Results' environment for the next results())."""
    if prof._environment is not None:
        return prof._environment

    devices = [cuda_index(prof.device)] if prof.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), (torch.cuda.device(prof.device) if devices else nullcontext()):
        return collect_environment(  # only rank 0's environment is written
            prof.device.type, device_index=devices[0] if devices else 0,
            measure_ceiling=prof.measure_ceiling and (prof._place is None or prof._place.rank == 0),
        )


def cuda_index(device: torch.device) -> int:
    """The GPU this rank trains on: the device's own index, else (plain "cuda") the process's current device,
    which a torchrun rank sets from its LOCAL_RANK; never a blanket 0."""
    return device.index if device.index is not None else current_cuda_index()


def observation(prof: ProfilerState, windows: list[Any], peaks: MemoryPeaks, micro_batch: int) -> RunObservation:
    """What the profiler saw, in the measurement core's terms."""
    records = prof._reservoir.in_order()
    typical_samples = most_common(prof._tally.per_step_samples)
    flops = prof._flop.count(typical_samples)
    first_step: FirstStep | Unavailable
    if len(prof._first_marks) == 2:
        start, end = prof._first_marks
        prof._clock.wait(end)
        first_step = FirstStep(seconds=prof._clock.elapsed_s(start, end),
                               compiled=prof.model is not None and hasattr(prof.model, "_orig_mod"))
    else:
        first_step = Unavailable(msg("hooks_first_step_needs_wrap"))
    if prof.model is not None and prof.optimizer is not None:
        owners: Any = memory.breakdown(prof.model, prof.optimizer, None, grads_present=False)
    else:
        owners = Unavailable(msg("hooks_owners_need_optimizer"))
    return RunObservation(
        device_type=prof.device.type, windows=windows, records=records, micro_batch_size=micro_batch,
        grad_accum_steps=most_common(prof._tally.per_step_micro) or 1, warmup_steps=prof.warmup_steps,
        samples_per_step=typical_samples or 0, tokens_per_sample=prof.tokens_per_sample,
        step_times_sampled=prof._reservoir.seen > len(records), memory=peaks, owners=owners, flops=flops,
        fingerprint=prof._flop.structure(flops), window_syncs=Unavailable(WINDOW_SYNCS_NOT_COUNTED),
        first_step=first_step, utilization=prof._sampler.result() if prof._sampler is not None else None,
        losses=Unavailable(LOSSES_NOT_READ),
        excluded_s={why: round(s, 6) for why, s in prof._excluded_s.items() if s},
        data_wait=None if (prof._wrap_used or prof._data_hooked) else Unavailable(msg("hooks_data_wait_needs_wrap")),
    )


def build_results(prof: ProfilerState, *, ratios: bool = True) -> Results:
    """The run's Results (source "hooks"): one trial, "skipped" with why when no step was timed. Reads the profiler
    as it stands; its open window as a snapshot (it waits for the pending events once; the window stays open)."""
    windows = list(prof._windows)
    if prof._recorder is not None and prof._recorder.started and (snapshot := prof._recorder.finish()).steps:
        windows.append(snapshot)
    peaks = memory_peaks(prof.device)  # before the environment probe: its matmuls allocate
    env = environment(prof)
    peak = choose_peak(env, prof.peak_tflops)
    notes = list(prof._results_notes)
    elapsed = prof._clock.now() - prof._t0
    tally = prof._tally
    timed = sum(w.steps for w in windows)
    typical_micro = most_common(tally.per_step_micro) or 1
    typical_samples = most_common(tally.per_step_samples)
    micro_batch = most_common(tally.micro_batch) or (typical_samples // typical_micro if typical_samples else 1)
    compiled = observe.compile_state(prof.model, prof._graphs_at_start)  # once: the config and the words agree
    config, unknown = trial_config(prof, micro_batch, typical_micro, compiled)
    common = dict(name="baseline", configuration="baseline", sequence=1, config=config, unknown_settings=unknown,
                  wall_time_s=elapsed, started_at=prof._started_at)
    argv = list(sys.argv)  # the command that reruns this loop, as the report's "Reproduce" shows it
    head = dict(perfscope_version=__version__, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                source="hooks", command=["python", *argv] if argv and argv[0].endswith(".py") else argv,
                environment=env, workload=workload_info(prof, compiled), peak=peak)
    if timed == 0:
        why = msg("hooks_no_timed_step", seen=prof._step_index, warmup=prof.warmup_steps, excluded=dict(prof._excluded))
        trial = Trial(status="skipped", error=words(why), **common)  # type: ignore[arg-type]
        return Results(**head, trials=[trial], notes=[*notes, why])  # type: ignore[arg-type]
    metrics = build_trial_metrics(observation(prof, windows, peaks, config.micro_batch_size))
    if len(tally.per_step_samples) > 1:
        notes.append(msg("samples_per_step_varied", low=min(tally.per_step_samples), high=max(tally.per_step_samples)))
    if metrics.step_times_sampled:
        notes.append(msg("step_times_sampled", timed=timed, kept=len(metrics.step_times_s)))
    if prof._excluded:
        notes.append(msg("not_timed", excluded=dict(prof._excluded), spent=dict(metrics.excluded_s), elapsed=elapsed))
    if peaks.on_device and CUDA_PEAKS_SINCE_START not in notes:
        notes.append(CUDA_PEAKS_SINCE_START)
    capture = prof._capture
    if capture is not None:
        if capture.trace_path is None:
            metrics.unavailable["trace"] = capture.missing()
        else:
            attach_trace(metrics, capture.trace_path, device_type=prof.device.type, steps=capture.active_steps)
        if capture.extra and capture.categories is not None:  # the memory window after the trace (Profiler(memory=))
            metrics.memory_categories = capture.categories
        elif capture.extra:
            metrics.unavailable["memory_categories"] = msg("memory_categories_failed",
                                                           error=capture.categories_error or capture.missing())
    if ratios:  # a job's are applied once every rank reported (perfscope.measure.ranks.apply_job)
        apply_utilization_ratios(metrics, peak, env)
    trial = Trial(status="ok", metrics=metrics, **common)  # type: ignore[arg-type]
    return Results(**head, trials=[trial], notes=notes)  # type: ignore[arg-type]


def workload_info(prof: ProfilerState, compiled: observe.Observation) -> WorkloadInfo:
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    path, sha = "<interactive>", ""
    if script is not None and script.is_file():
        path, sha = str(script.resolve()), file_sha256(script)
    params = sum(p.numel() for p in prof.model.parameters()) if prof.model is not None else None
    declared: dict[str, Any] = {"source": "hooks", "tokens_per_sample": prof.tokens_per_sample,
                                "precision": prof.precision, "samples_per_step": prof.samples_per_step}
    declared.update(prof._loader_config)
    declared.update(observe.observed_words(prof._flop.precision_seen, compiled))
    declared.update(prof._declared)
    declared = {k: v for k, v in declared.items() if v is not None}  # absent is absent, never "None" in the report
    return WorkloadInfo(path=path, sha256=sha, name=prof.name, declared=declared, parameter_count=params)


def trial_config(prof: ProfilerState, micro_batch: int, accum: int, compiled: observe.Observation) -> tuple[TrialConfig, list[str]]:
    """What is known about the user's loop as a TrialConfig, and the fields that were not observed."""
    known: dict[str, Any] = {"device": prof.device.type, "warmup_steps": prof.warmup_steps,
                             "micro_batch_size": max(1, micro_batch), "grad_accum_steps": max(1, accum),
                             "tf32": matmul_tf32().enabled}  # never raises, whichever TF32 API the loop used
    seen, unknown = observe.observed_settings(prof.precision, prof._flop.precision_seen, compiled)
    known.update(seen)
    if prof._loader_config:
        known.update({k: v for k, v in prof._loader_config.items() if v is not None and k != "prefetch_factor"})
        if prof._loader_config.get("num_workers"):
            known["prefetch_factor"] = prof._loader_config.get("prefetch_factor")
    else:
        unknown += ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"]

    # Every registered knob reads its own setting (Knob.observe); what none read is unknown, never the default.
    knob_known, knob_unknown = observe_loop(Loop(device=prof.device.type, model=prof.model, optimizer=prof.optimizer))
    known.update(knob_known)
    unknown = [name for name in unknown + knob_unknown if name not in knob_known]
    if prof._place is not None:
        known["nnodes"], known["nproc_per_node"] = layout(prof._place, [])
        known["data_parallel"] = data_parallel_of(prof.model, prof.optimizer)
        known.update(ddp_settings(prof.model))
        unknown += {"ddp": ["no_sync", "comm_hook"], "zero1": ["no_sync", "comm_hook"],
                    "fsdp": ["no_sync", "reshard_after_forward", "fsdp_mixed_precision"]}.get(known["data_parallel"], [])
    known.update(prof._described_config)  # what a framework adapter read from its trainer
    unknown = [name for name in unknown if name not in prof._described_config]
    return TrialConfig(**known), unknown

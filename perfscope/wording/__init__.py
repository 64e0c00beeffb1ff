"""The words of every message a run records (perfscope.results.messages): one template per code.

    words(msg("no_timed_step"))    # "no timed step"

The only place a warning, an `unavailable` reason or a flag becomes prose: the HTML page, the Markdown, the terminal
and `perfscope check` alike. A pure helper beside perfscope.snippets rather than inside report/, because the knobs and
rules (which report/ imports) still quote a reason in their own prose. A template is a str.format string over the
message's parameters, or a keyword-only function of them; a parameter that is itself a message is worded first.
tests/test_wording.py checks that every code perfscope writes has a template that gets its parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from perfscope.results.messages import Message
from perfscope.wording._text import join_parts
from perfscope.wording.capture import CAPTURE
from perfscope.wording.check import CHECK
from perfscope.wording.flops import FLOPS
from perfscope.wording.hooks import HOOKS
from perfscope.wording.search import SEARCH
from perfscope.wording.structure import STRUCTURE


def _persistent_load(*, runs: int, spoiled: dict[str, int], last: str | list[str], gave_up_after: int | None = None) -> str:
    listed = ", ".join(f"{name} (×{count})" for name, count in spoiled.items())
    return (f"other load on this machine persisted through {runs} run(s) of a measurement, "
            f"{sum(spoiled.values())} time(s): {listed} (the last: {join_parts(last)}): those runs are not used as evidence"
            + (f"; after {gave_up_after} times a contended run was no longer measured again" if gave_up_after else "")
            + "; measure on a quiet machine")


def _stack_failed(*, knobs: list[str], reason: str, joining: str, trial: str) -> str:
    return (f"{' + '.join(knobs)} together failed ({reason}), though {joining} "
            f"alone and the stack without it ran: see the failed trial {trial}")


def _against_peak(*, tflops: float, source: str | None = None) -> str:
    return f"the {tflops:g} TFLOP/s peak" + (f" ({source})" if source is not None else "")


def _trace_not_captured(*, notes: list[str]) -> str:
    """``notes``: worded messages (a str in a file written before they were: kept as written)."""
    return "; ".join(notes) or "the capture window was not reached"


def _ranks_did_not_report(*, ranks: list[int], timeout_s: float) -> str:
    return (f"rank(s) {', '.join(map(str, ranks))} did not report within {timeout_s:g} s of rank 0's "
            "save() (every rank must call prof.save())")


def _waterfall_no_trace(*, traced: bool) -> str:
    return ("its trace has no step time" if traced else "no profiler trace of this run") + \
        ": the step is not split beyond its data wait"


def _other_processes_busy(*, cores: float, cpus: int, beyond_quota: float) -> str:
    spare = f" ({beyond_quota:g} of them beyond its quota)" if beyond_quota else ""
    return f"other processes used {cores:.2f} cores of the {cpus} CPUs this run may use{spare}"


def _captured_on_demand(*, first: int, last: int, pid: int, host: str, rank: int, requested: int, steps: int,
                        attempts: int = 1) -> str:
    ran = last - first + 1
    ended = f" (the job ended after {ran} of the {steps} steps)" if ran < steps else ""
    asked = f"; the ranks' first {attempts - 1} request(s) recorded different steps and were discarded" if attempts > 1 else ""
    return (f"captured on demand: steps {first}-{last} of process {pid} on {host} (rank {rank}), "
            f"requested while it ran step {requested}{ended}{asked}")


def _ranks_traced(*, traced: int, world: int) -> str:
    if traced == world:
        return f"all {world} ranks of the job traced"
    return (f"{traced} of the job's {world} ranks traced: the per-rank table, stragglers and communication "
            "cover the traced ranks only")


def _stack_not_confirmed(*, knobs: list[str], min_gain: float, runs: int, ratio: float | None = None,
                         low: float | None = None, high: float | None = None, verdict: str | None = None) -> str:
    why = f"{ratio:.2f}× [{low:.2f}, {high:.2f}], {verdict}" if ratio is not None else "no confirmation run (budget)"
    return (f"the stacked configuration ({', '.join(knobs)}) was not confirmed decidedly faster than the baseline, "
            f"by {min_gain:.0%} or more, in {runs} confirmation run(s) ({why}): the baseline is the recommendation")


def _stack_not_joined(*, knobs: list[str], name: str, failed: bool, reason: str, joining: str) -> str:
    return (f"the stack {' + '.join(knobs)} ({name}) {'failed' if failed else 'was not usable'}: {reason}; "
            f"{joining} is not in the recommendation, which was measured without it")


def _baseline_sessions(*, runs: list[int], hosts: list[str]) -> str:
    where = f" on {len(hosts)} host(s): {', '.join(hosts)}" if hosts else ""
    return f"baseline: {len(runs)} stored session(s) of {'/'.join(map(str, runs))} run(s){where}"


def _few_sessions(*, sessions: int, assumed: float, needed: int) -> str:
    return (f"{sessions} stored session(s): too few to estimate how far days differ, so the gate assumes {assumed:.0%} "
            "(docs/ci-gate.md): it fails drops of about 20% or more, and identical code comes out INCONCLUSIVE (exit 3) "
            f"rather than PASS at a 5% tolerance; store {needed} sessions (`perfscope baseline update`), state "
            "`check --between-session PCT` (an A/A measurement of this runner), or gate with `perfscope ab` (both "
            "revisions in one job)")


def _unusable_events(*, counts: dict[str, int]) -> str:
    why = ", ".join(f"{n} with {reason}" for reason, n in counts.items())
    return f"{sum(counts.values())} complete event(s) unusable and skipped: {why}"


def _hooks_no_timed_step(*, seen: int, warmup: int, excluded: dict[str, int]) -> str:
    return (f"no timed step: {seen} optimizer step(s) seen, {warmup} of them warm-up"
            + (f", {sum(excluded.values())} excluded ({', '.join(excluded)})" if excluded else ""))


def _not_timed(*, excluded: dict[str, int], spent: dict[str, float], elapsed: float) -> str:
    return "not timed: " + ", ".join(
        f"{why} ({n} ×" + (f", {spent[why]:.2f} s, {spent[why] / elapsed:.0%} of wall time)" if why in spent else ")")
        for why, n in excluded.items())


def _contended(*, why: str | list[str], runs: int | None = None, gave_up_after: int | None = None,
               budget: bool = False) -> str:
    """A run other load spoiled (perfscope.trial.session): measured again, or not, and why not."""
    if budget:
        tail = "; not measured again: the budget would not allow it"
    elif gave_up_after:
        tail = f" (persisted through {gave_up_after} measurements: not measured again)"
    else:
        tail = f" (persisted through {runs} runs)" if runs else ""
    return f"contended: {join_parts(why)}{tail}"


Wording = str | Callable[..., str]


# --- semantics changes (KnobOutcome.changes_semantics, Finding.caveats): the code is the kind ------------------------


def _global_batch(*, before: int, after: int, parts_before: str | None = None, parts_after: str | None = None) -> str:
    factor = after / before
    how = f" (micro-batch × accumulation × ranks: {parts_before} → {parts_after})" if parts_before else ""
    return (f"global batch {before} → {after}{how}: scale the learning rate (linear ×{factor:g} for SGD, or √ "
            f"×{factor ** 0.5:.2f} for Adam-type optimizers) and re-tune warm-up; steps per epoch change")


def _low_precision_params(*, dtype: str) -> str:
    mantissa = {"bf16": "8-bit", "fp16": "11-bit"}.get(dtype, "reduced")
    return (f"forward and backward run on {dtype} parameters ({mantissa} mantissa) and gradients are summed across "
            "ranks in it (rounding grows with the number of ranks); the fp32 shards and optimizer step are kept — "
            "compare the loss curve over a few hundred steps")


def _adafactor_recipe(*, adam_decay: bool) -> str:
    decay = " Adam's L2 weight decay becomes decoupled decay;" if adam_decay else ""
    return ("the same lr per parameter group, but Adafactor reads it as the cap on a relative step (lr × the "
            f"weights' RMS), with no momentum and its own β₂ schedule:{decay} re-tune the learning rate and warm-up")


SEMANTICS: dict[str, Wording] = {
    "numerics": "numerics: {change}",  # perfscope.ranking: the one kind a recommendation may carry unasked
    "bf16_matmuls": "matmuls/convolutions in bf16 (8-bit mantissa); compare the loss curve over a few hundred steps",
    "fp16_loss_scaling": "fp16 (5-bit exponent) with dynamic loss scaling; watch for overflow (inf/NaN) steps",
    "tf32_matmuls": "fp32 matmuls with a 10-bit mantissa (TF32)",
    "reduced_precision_matmuls": "reduced-precision matmuls; compare the loss curve over a few hundred steps",
    "compressed_gradients": ("gradients are all-reduced in {hook} (summed in half precision across the ranks, then cast "
                             "back): compare the loss curve over a few hundred steps"),
    "low_precision_params": _low_precision_params,
    "global_batch": _global_batch,
    "training_recipe": ("training recipe: {optimizer} replaced by {replacement} — {caveat}; check convergence over a full "
                        "run (the measured steps show speed and memory, not the final loss)"),
    "adafactor_recipe": _adafactor_recipe,
    "adamw_8bit_recipe": ("the same algorithm and hyper-parameters (lr, betas, eps, weight decay) with both moments "
                          "quantized to 8 bits per block: usually within noise of 32-bit state, but re-check the learning "
                          "rate and warm-up, which quantization noise in the moments can make too aggressive"),
    "lean_optimizer_state": "training recipe: quantized or factored optimizer state changes the updates; check convergence",
    "static_graph": ("static_graph=True is correct only if the same parameters receive gradients every step (no branch, "
                     "expert or head skipped on some steps); otherwise gradients are wrong or DDP raises an error"),
    "padded_vocabulary": "padded vocabulary rows must be masked or ignored by the loss",
    "checkpointing_recomputes": ("checkpointing recomputes the blocks' forward: HFU rises, MFU falls unless a larger "
                                 "micro-batch pays it back"),
    "checkpointing_would_not_help": "checkpointing would not help here: activations are not what holds the peak",
    "sharding_needs_ranks": ("sharding needs several data-parallel ranks and adds communication (~1.5× DDP's); on one "
                             "GPU, FSDP's CPUOffload or lower-precision weights free them instead"),
}

WORDING: dict[str, Wording] = {
    # read from files written before messages were records (perfscope.results.migrate)
    "legacy": "{text}",
    "persistent_load_v2": "{text}",
    # results-level warnings
    "persistent_load": _persistent_load,
    "stack_failed": _stack_failed,
    # a window's contention (perfscope.measure.contention)
    "contention": lambda *, parts: join_parts(parts),
    "other_processes_busy": _other_processes_busy,
    "hypervisor_stole": "the hypervisor stole {cores:.2f} cores",
    "gpu_neighbours": "{count} other process(es) on the GPU",
    # why a run is not evidence (Trial.excluded)
    "contended": _contended,
    "contended_v2": "{text}",
    "warmup_discarded": "warm-up: the job's first run of this revision, discarded (cold caches and first fork)",
    "cancelled_by_interrupt": "cancelled: the sweep was interrupted (Ctrl-C) while it ran",
    # notes on the run (Results.notes)
    "text": "{text}",
    "read_from_schema_1": ("read from a schema-1 file: throughput and MFU recomputed as work / wall time from its "
                           "per-step times; its sweep gains came from median step times within single runs and are "
                           "not comparable with run-based gains"),
    "no_sweep_baseline_failed": "no sweep: the baseline run did not succeed ({status})",
    "interrupted_by_user": "interrupted by the user: the runs that finished are reported",
    "layout_search_not_run": "layout search not run: {why}",
    "captured_on_demand": _captured_on_demand,
    "rank_memory_not_written": ("memory on rank {rank}: no breakdown was written (the profiler's memory profile "
                                "failed in the job)"),
    "rank_memory": "memory on rank {rank}: {memory}; each category's maximum in {file}",
    "ranks_traced": _ranks_traced,
    "rank_from_file_order": lambda *, files: f"no distributedInfo.rank in {', '.join(files)}: rank taken from the file order",
    "rank_note": "rank {rank}: {note}",
    "job_figures_unavailable": "job figures unavailable: {why}",
    "torchrun_job": ("a torchrun job of {ranks} ranks ({backend}): samples/s and MFU are the job's (every rank's work "
                     "over the slowest rank's window; MFU per device); step times, data wait and memory are rank 0's, "
                     "every rank's are in the per-rank view"),
    "rank_trace_on_node": "rank {rank}'s trace stays on its node ({trace})",
    # the hooks' notes on the run (perfscope.hooks)
    "hooks_no_timed_step": _hooks_no_timed_step,
    "samples_per_step_varied": "samples per step varied ({low}..{high}): samples/s counts every step's own samples",
    "step_times_sampled": ("{timed} steps timed; the per-step times kept are a uniform sample of {kept} of them "
                           "(throughput and data wait cover every timed step)"),
    "not_timed": _not_timed,
    "cuda_peaks_since_start": "CUDA memory peaks are since the process started (perfscope does not reset them)",
    "watch_new_syncs": lambda *, step, changes: f"watch: the steps traced after step {step} show {'; '.join(changes)}",
    "watch_step_time_shifted": lambda *, began, at, detected, changes: (
        f"watch: step time shifted at step {began} ({at}), detected at step {detected}: " + "; ".join(changes)),
    **HOOKS,  # the hooks' and measure/'s: a watch alarm's changes, the OOM snapshot, the memory window
    # notes on the sweep (Sweep.notes)
    "order_randomized": "baseline/candidate order within each pair randomized (seed {seed})",
    "gain_from_confirmation": ("the recommendation's gain comes from {runs} confirmation run(s) measured after it was "
                               "selected ({selection} selection run(s) left out: the winner's curse)"),
    "budget_left_undone": lambda *, left: f"the budget left undone: {'; '.join(left)}",
    "changes_semantics": lambda *, semantics: ("the recommended configuration changes training semantics: "
                                               + "; ".join(semantics)),
    "stack_not_confirmed": _stack_not_confirmed,
    "earlier_gain_not_confirmed": ("re-measured, {name} did not confirm its earlier {before:.2f}× ({selection} selection "
                                   "run(s)): {ratio:.2f}× over {runs} confirmation run(s); this machine's run-to-run "
                                   "noise, not the knobs, may explain the earlier figure"),
    "stopped_nothing_decided": ("{why}: no knob had been measured decidedly faster, by {min_gain:.0%} or more: "
                                "the baseline is the recommendation"),
    "stopped_decided_so_far": lambda *, why, knobs, left: (f"{why}: the recommendation is the configuration decided so "
                                                           f"far ({', '.join(knobs)}); not finished: {'; '.join(left)}"),
    "micro_batch_researched": lambda *, knobs, fits, stopped=None: (
        f"micro-batch re-searched on the stack ({', '.join(knobs)}): fits up to {fits}" + (f" ({stopped})" if stopped else "")),
    "no_knob_faster": "no knob made the baseline decidedly faster, by {min_gain:.0%} or more: the baseline is the recommendation",
    "runs_held_back": lambda *, undecided, held: (f"more runs of {', '.join(undecided)} (undecided) were left out: the "
                                                  f"budget's last {held} run(s) are kept for the stacking and the confirmation"),
    "stack_not_joined": _stack_not_joined,
    # notes on a parallel sweep's lanes (ParallelSweep.notes)
    "knobs_sized_for_lane": "knobs sized for a lane's {cores} core(s), not the machine's",
    "aa_check": lambda *, runs, spread, dropped: (
        f"A/A check: {runs} baseline runs per lane; lane-to-lane spread "
        + (f"{spread:.1%}" if spread is not None else "n/a") + (f"; {dropped} outlier lane(s) dropped" if dropped else "")),
    "lanes_interrupted": "interrupted: {said}",
    # notes on the facts read from a trace (TraceFacts.notes, CommunicationFacts.notes)
    "read_from_untyped_facts": ("read from the untyped trace facts of an older perfscope: idle attribution and "
                                "launch-bound were decided by its rules, and on CUDA its GEMM shape times are host "
                                "launch times"),
    "steps_found_from": "no ProfilerStep#N spans in the trace: {steps} steps found from {source}",
    "whole_span_as_steps": ("no ProfilerStep#N spans and no step marks in the trace: its whole span was taken as "
                            "{steps} step(s), one-time set-up included (figures per step are bounds, not the loop's)"),
    "unusable_events": _unusable_events,
    "no_device_activity": "no device activity in the CUDA trace (CUPTI off?): {read}",
    "gloo_shares_cores": ("gloo runs collectives on CPU threads that share the cores with the compute: overlapped "
                          "time still competes for them"),
    "no_collectives_in_steps": "no collectives in the traced steps",
    # perfscope check / ab / baseline: how the comparison was made, and what to beware of
    "runs_not_used": lambda *, role, runs, why: f"{role}: {runs} run(s) not used ({join_parts(why)})",
    "shared_measured_ceiling": "both peaks are measured matmul ceilings: MFU uses the baseline's for both runs",
    "baseline_sessions": _baseline_sessions,
    "run_under_load": lambda *, role, name, load: f"{role} run {name} was measured under load ({join_parts(load)})",
    "ab_order": "order (warm-up first, discarded): {rounds} (--seed {seed})",
    "ab_one_job": lambda *, host, candidate, baseline: (
        f"A/B in one job on {host or 'this machine'}: {candidate} candidate run(s) interleaved with {baseline} baseline "
        "run(s) in a random order per round; machine and day offsets cannot enter"),
    "no_baseline_configuration": lambda *, usable: (f"no usable run of the configuration 'baseline' (usable: "
                                                    f"{', '.join(usable)}); pass --trial to check"),
    "few_sessions": _few_sessions,
    "few_baseline_runs": ("{runs} run(s) in the baseline: the gate needs at least 3 runs in all to know this machine's "
                          "run-to-run noise (use `perfscope analyze --repeat 5`)"),
    # unavailable: sampling the device
    "no_cuda_device": "no current CUDA device: {error}",
    "cpu_no_gpu_sample": "CPU trial: no GPU to sample",
    "nvml_unavailable": "NVML unavailable: {error}",
    "nvml_device_not_found": "NVML device of CUDA device {index} not found: {error}",
    "nvml_error": "NVML: {error}",
    "shorter_than_sampling": "the measured region was shorter than one sampling interval",
    # unavailable: the run's figures
    "samples_per_step_unknown": ("samples per step unknown: iterate with prof.wrap(loader) over tensor batches, "
                                 "or pass Profiler(samples_per_step=...) / prof.step(samples=...)"),
    "no_timed_step": "no timed step",
    "no_flop_count": "no FLOP count",
    "no_peak": "no peak FLOP/s known for this device (pass --peak-tflops)",
    "no_measured_ceiling": "no measured ceiling",
    "against_peak": _against_peak,
    "against_ceiling": "the matmul ceiling measured at {tflops:g} TFLOP/s (a ceiling measured while the machine was busy reads low)",
    "implausible_ratio": ("{name} computed as {value:.0%} of {against}: above 100% cannot be true; the FLOP count per step "
                          "({flops:.3g}) or the denominator is wrong, so it is not reported"),
    # unavailable: the machine
    "exception": "{error}",
    "unreadable": "{path} unreadable ({error})",
    "cpuinfo_no_model": "/proc/cpuinfo has no 'model name'",
    "cpu_model_unknown": "{why}; the platform reports only the architecture ({machine})",
    "numa_not_linux": "read from /sys/devices/system/node on Linux; this platform is {system}",
    "numa_no_cpus": "{path} lists no node with CPUs (a kernel without NUMA support?)",
    "no_datasheet_entry": "no datasheet entry for {device!r}; MFU uses the measured matmul ceiling (or --peak-tflops)",
    "no_datasheet_peak": "no datasheet peak",
    "cpu_no_datasheet_peak": "CPUs have no comparable datasheet peak; MFU uses the measured matmul ceiling",
    "slice_share_unknown": ("{what} of an {gpu}: the slice's SM share is unknown, so the full GPU's datasheet peak "
                            "would overstate it; MFU uses the measured matmul ceiling"),
    "cpu_not_applicable": "not applicable: the run used the CPU",
    "rocm_build": "this PyTorch is a ROCm build (HIP {hip})",
    "no_cuda_build": "this PyTorch build has no CUDA (torch.version.cuda is None)",
    "psutil_cannot_read": "psutil cannot read it on this platform",
    "cpu_host_memory": "CPU: host memory is the device memory",
    "not_reported": "not reported by torch or NVML on this machine",
    # unavailable: the ranks of a distributed run
    "gc_not_tracked": "Python GC was not tracked in this run's window",
    "owners_not_counted": "the memory owners were not counted (no model and optimizer)",
    "no_load_measured": "no window measured the machine's load",
    "cpu_peak_is_rss": "CPU has no allocator peak: this is the process's peak host RSS",
    "cpu_no_reserved": "CPU: no caching allocator",
    "activations_need_peak": "needs the CUDA allocator peak",
    "cpu_no_fingerprint_memory": "CPU: no allocator peak (host RSS varies between identical runs)",
    "kernel_launches_from_trace": "CUDA only, from the profiled window",
    "trace_analysis_failed": "trace analysis failed: {error}",
    # flags: figures that cannot be true as measured
    "recompiled_in_window": ("torch.compile recompiled {times} time(s) inside the timed window "
                             "(a new input shape or a guard failure): compile time is in the measured time"),
    "rank_window_unknown": "a rank's samples or timed window are unknown",
    "job_figure_unknown": "the job's figure is unknown: {why}",
    # unavailable: what the hooks cannot see in the user's loop
    "hooks_losses_not_read": "hooks never read the loss (reading it is a device sync)",
    "hooks_window_syncs_not_counted": ("hooks: not counted over the window (your process's warning filters and CUDA sync "
                                       "debug mode are left alone); a sync every N steps is in the fingerprint only when "
                                       "the counted step hits it"),
    "hooks_first_step_needs_wrap": "measured only when the first step's batch comes through prof.wrap()",
    "hooks_owners_need_optimizer": "needs Profiler(model, optimizer=...)",
    "hooks_data_wait_needs_wrap": "not measured: iterate with prof.wrap(loader) to measure the time blocked on data",
    "trace_not_captured": _trace_not_captured,
    # why the hooks captured no trace (the notes of trace_not_captured)
    "profiler_already_running": "a torch.profiler was already running on this thread: it was left alone, no capture",
    "trace_unavailable": "trace unavailable",
    # unavailable: FLOPs
    "flops_disabled": "FLOP counting disabled for this trial",
    "flops_failed": "FLOP counting failed: {error}",
    "structure_failed": "structure counting failed: {error}",
    "hooks_flops_disabled": "FLOP counting disabled (Profiler(count_flops=False))",
    "flop_step_not_reached": "the FLOP-counting step (step {step}) was not reached",
    "flop_count_paused": ("{reason} ran inside each of the {tries} steps the FLOP count was tried on "
                          "(pass Profiler(flops_per_step=...))"),
    "run_ended_in_flop_step": "the run ended during the FLOP-counting step",
    "step_not_counted": "that step was not counted",
    "counted_at_flop_step": "counted at the FLOP-counting step: {why}",
    "compiled_flops_unseen": ("{what}: the FLOP counter cannot see into compiled graphs on this torch "
                              "(pass Profiler(flops_per_step=...))"),
    "includes_peer_ranks": "includes the job's other ranks on this node (their load is unknown)",
    "profiler_disabled_itself": "its profiler disabled itself after an internal error: {error}",
    "ranks_did_not_report": _ranks_did_not_report,
    "rank_without_window": "a rank has no timed window, or its sample count is unknown",
    # unavailable: what a trace the user brought cannot tell (perfscope trace)
    "trace_no_samples": "a trace does not record the batch: there are no samples to divide the wall time by",
    "trace_no_flops": "a trace has no FLOP count (nothing was run to count them)",
    "trace_no_memory": "not read from a trace (memory is measured by a run)",
    "trace_no_utilization": "nothing was sampled: a trace has no device or host utilization",
    "trace_no_batch": "a trace does not record the batch",
    "trace_no_accumulation": "a trace does not say how many micro-batches an optimizer step accumulates",
    "trace_no_data_spans": ("the trace has no {label} spans (perfscope marks the loop's next() with them) and no "
                            "DataLoader __next__ spans: its data wait is not marked, and 0 is not a measurement"),
    "trace_no_step_marks": "no ProfilerStep#N spans or step marks: the trace's whole span was taken as {steps} step(s)",
    "trace_no_layout": "a trace does not record the job's layout of nodes and ranks per node",
    "trace_no_wrapping": "a trace does not say how the model was wrapped (DDP, FSDP, ...)",
    "trace_no_local_window": ("a trace has no window without gradient communication: stragglers are tested on the "
                              "traced step minus its exposed collective time"),
    "trace_no_rank_memory": "not read from a trace",
    "trace_not_recorded": "not recorded in a trace",
    "trace_no_device_properties": "the trace has no deviceProperties",
    "trace_no_datasheet_entry": "no datasheet entry for this device",
    "trace_device_unknown": "the device is unknown",
    # unavailable: structure, TF32, trace
    "window_syncs_on_cpu": ("CPU: no device to wait for and no sync debug mode; syncs are counted on the one counted "
                            "step (a sync every N steps is seen only when that step hits it)"),
    "sync_debug_mode_already_set": "the CUDA sync debug mode was already set (by your code): left alone, not counted",
    "sync_debug_mode_failed": "the CUDA sync debug mode could not be set: {error}",
    "tf32_state_unknown": "{why}",
    "trace_capture_unavailable": "trace capture not available: {error}",
    "trace_capture_failed": "trace capture failed: {error}",
    "memory_categories_failed": "profiling memory by category failed: {error}",
    "trial_died_in_trace": "the trial process {how} during trace capture",
    "no_trace_captured": "no trace captured",
    "dataset_profile_failed": "profiling the Dataset failed: {error}",
    # unavailable: distributed and model-parallel trials
    "model_parallel_exchanges": "tensor / pipeline parallelism: forward and backward exchange activations between the ranks",
    "forward_gathers_parameters": "{strategy}: forward gathers parameters from the peers",
    "no_step_without_communication": "{why}, so no step runs without communication",
    "no_pipeline_order": "the schedule exposes no action order (pipeline_order)",
    "replay_failed": "replay failed: {error}",
    # unavailable: the MFU waterfall's parts (perfscope.results.waterfall)
    "padding_unknown": ("not measured: perfscope counts every token position of a batch, padding included, as model FLOPs "
                        "(pad positions are not marked), so padded FLOPs sit inside the measured MFU, not in the gap"),
    "waterfall_no_trace": _waterfall_no_trace,
    "no_collectives_traced": "no collectives in the trace (one process)",
    "no_hardware_flops": "no hardware FLOP count: recompute taken as 0",
    "no_matmul_kernels": "the trace has no matmul-class kernels to hold the FLOPs MFU counts",
    "no_peak_for_device": "no peak FLOP/s for this device",
    "mfu_unknown": "MFU unknown: {why}",
    "denominator_peak": "{tflops:g} TFLOP/s ({dtype}): {source}",
    "denominator_step": "the {step} step (MFU unknown: {why})",
    # notes on the MFU waterfall
    "exposed_communication_from": "exposed communication from {where}",
    "communication_counted_exposed": ("communication kernels without an overlap measurement: their share of the busy "
                                      "time is counted as exposed"),
    "overlapping_kernels_shared": "overlapping kernels share the GPU's busy time in proportion to their summed durations",
    "data_wait_not_marked": "the data wait is not marked: time the host spent loading data counts as launch & host overhead",
    "points_unattributed": ("{points:+.1f} points unattributed: the trace's matmul time and the window's FLOPs "
                            "disagree"),
    **SEMANTICS,
    **SEARCH,
    **CHECK,  # the CI gate's: why nothing was compared, each metric's verdict
    **CAPTURE,  # a trace capture's note
    **FLOPS,  # a FLOP count's notes
    **STRUCTURE,  # the structural diff: each change, its notes, what a knob changed in the step
}


def words(message: Message) -> str:
    """The prose of ``message``; a code without a template is a bug, said with the code rather than raised."""
    template = WORDING.get(message.code)
    params = {k: _param(v) for k, v in message.params.items()}
    if template is None:
        return f"[{message.code}] {params}"
    return template.format(**params) if isinstance(template, str) else template(**params)


def _param(value: Any) -> Any:
    if isinstance(value, Message):
        return words(value)
    if isinstance(value, list):
        return [_param(v) for v in value]
    return value


def joined(messages: list[Message]) -> str:
    """The words of several messages as one line, "; "-joined (e.g. KnobOutcome.reason)."""
    return "; ".join(words(m) for m in messages)


def reason(unavailable: Mapping[str, Message], key: str, default: str = "") -> str:
    """The words of ``unavailable[key]``, or ``default`` when the map has no reason for it."""
    found = unavailable.get(key)
    return words(found) if found is not None else default

"""Every catalogue of perfscope/wording/ in words: one case per template, so a template's words change only on
purpose; tests elsewhere assert codes. A catalogue is the dict a submodule names after itself (perfscope.wording.check:
CHECK), found here by name: a new one needs only its cases."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import perfscope.wording
from perfscope.check import GateOptions, run_gate
from perfscope.check.render import render_junit, render_markdown, render_table
from perfscope.results.messages import Message, msg
from perfscope.wording import words
from tests.factories import make_results, make_runs

GiB = 2**30
steps = msg("numerics_steps", first=2, last=7, global_steps=True, samples_per_step=16)
RUNS = msg("runs_compared", current=5, baseline=5, basis=None)
POWER = msg("power_at_tolerance", max_drop=0.05, power=0.41, needed=14, target=0.8)
INTERVAL = {"confidence": 0.95, "max_drop": 0.05}

CASES: dict[str, list[tuple[Message, str]]] = {
    "capture": [
        (msg("trace_empty"), "the profiler produced an empty trace"),
        (msg("trace_too_large", size=72_400_000, max_bytes=50_000_000),
         "trace of 72 MB (gzipped) exceeds the 50 MB cap: shorten the window"),
        (msg("trace_export_failed", error="OSError: disk full"), "trace export failed: OSError: disk full"),
        (msg("memory_breakdown_failed", error="KeyError: 'device'"), "memory breakdown failed: KeyError: 'device'"),
        (msg("capture_profiler_running"), "a profiler is already running on this thread: capture skipped (yours is left alone)"),
        (msg("profiler_start_failed", error="RuntimeError: CUPTI unavailable"),
         "the profiler could not start: RuntimeError: CUPTI unavailable"),
        (msg("profiler_step_failed", error="RuntimeError: boom"), "profiler step failed: RuntimeError: boom"),
        (msg("profiler_stop_failed", error="RuntimeError: already stopped"),
         "profiler stop failed: RuntimeError: already stopped"),
        (msg("trace_window_incomplete"), "no trace was produced (the window did not complete)"),
    ],
    "check": [
        (msg("gate_no_recommendation", role="baseline"),
         "the baseline results have no sweep-recommended configuration (--trial recommended)"),
        (msg("gate_no_run", role="current", configuration="amp_bf16", known=["baseline", "compile"]),
         "the current results have no run of 'amp_bf16' (configurations: baseline, compile)"),
        (msg("gate_no_run", role="current", configuration="amp_bf16", known=[]),
         "the current results have no run of 'amp_bf16' (configurations: none)"),
        (msg("gate_baseline_failed", name="baseline", status="crashed", error="RuntimeError: boom"),
         ("baseline run 'baseline' did not succeed (status crashed: RuntimeError: boom); record a new baseline with "
          "`perfscope baseline update`")),
        (msg("gate_structure_not_compared", notes=[msg("no_fingerprint", side="baseline")]),
         "--fail-on-structure: the baseline has no structural fingerprint (recorded by an older perfscope, or counting failed)"),
        (msg("gate_no_evidence"), "the baseline has no run usable as evidence (all excluded or failed)"),
        (msg("gate_metric_unavailable", metric="mfu", error="MFU unavailable (no peak FLOP/s recorded)"),
         "mfu: MFU unavailable (no peak FLOP/s recorded)"),
        (msg("ab_baseline_failed", name="baseline-r1", status="oom", error="CUDA out of memory"),
         "the baseline revision's run 'baseline-r1' ended oom: CUDA out of memory"),
        (msg("verdict", outcome="regression", title="MFU", change=-0.2, low=-0.22, high=-0.18, runs=RUNS, **INTERVAL),
         "MFU -20.0% (95% interval -22.0% .. -18.0%; 5 vs 5 runs): worse than the 5.0% tolerance"),
        (msg("verdict", outcome="pass", title="MFU", change=0.01, low=-0.01, high=0.03, runs=RUNS, **INTERVAL),
         "MFU +1.0% (95% interval -1.0% .. +3.0%; 5 vs 5 runs): within the 5.0% tolerance"),
        (msg("verdict", outcome="within_noise", title="step time", change=0.1, low=-0.05, high=0.27, **INTERVAL,
             runs=msg("runs_compared", current=3, baseline=5, basis="between-session 1.0% (stated)"), resolves=0.21,
             decides=msg("decide_more_sessions"), across_sessions=True),
         ("step time +10.0% (95% interval -5.0% .. +27.0%; 3 vs 5 runs; between-session 1.0% (stated)): past the 5.0% "
          "tolerance, but within the noise between sessions (it resolves changes of about 21%); more stored sessions "
          "(`perfscope baseline update`), more runs, or `perfscope ab` would decide it")),
        (msg("verdict", outcome="drop_not_excluded", title="samples/s", change=0.0, low=-0.08, high=0.09, **INTERVAL,
             runs=msg("runs_interleaved", candidate=8, baseline=8, power=POWER)),
         ("samples/s +0.0% (95% interval -8.0% .. +9.0%; 8 candidate runs interleaved with 8 baseline runs; power at the 5% "
          "tolerance 41%; --rounds 14 would reach 80% at this noise): the interval reaches past the 5.0% tolerance: a drop "
          "larger than it is not excluded")),
        (msg("verdict_run_failed", title="MFU", role="current", name="baseline", status="oom", error=None),
         "MFU: current run 'baseline' ended oom"),
        (msg("verdict_run_failed", title="samples/s", role="candidate", name="candidate", status="crashed",
             error="RuntimeError: boom"),
         "samples/s: candidate run 'candidate' ended crashed: RuntimeError: boom"),
        (msg("verdict_no_runs", title="MFU"), "MFU: no runs to compare"),
        (msg("verdict_too_few_runs", title="MFU", baseline=1, current=1),
         ("MFU: 1 baseline run(s) and 1 current run(s) cannot separate a regression from this machine's run-to-run noise; "
          "save a baseline of several runs (`perfscope analyze --repeat 5`, then `perfscope baseline save`) and check current "
          "runs from `--repeat 3`")),
        (msg("verdict_no_interval", title="MFU", why="no session has two runs: the run-to-run noise is unknown"),
         "MFU: no interval: no session has two runs: the run-to-run noise is unknown"),
        (msg("verdict_with_structure", verdict=msg("verdict_no_runs", title="MFU"),
             structure="structural changes: +1 host sync per step"),
         "MFU: no runs to compare; structural changes: +1 host sync per step"),
        (msg("ab_no_evidence", title="samples/s"),
         ("samples/s: no run of one side counts as evidence (each was failed or measured under load, see the notes): nothing "
          "to decide on; run on a quiet machine")),
        (msg("ab_no_interval", title="samples/s", change=-0.2, runs=1, power=msg("power_unknown")),
         ("samples/s -20.0%: no interval from 1 candidate run(s); power at the tolerance unknown (no interval); use more "
          "--rounds")),
        (RUNS, "5 vs 5 runs"),
        (msg("runs_compared", current=3, baseline=10, basis="between-session spread from 10 stored sessions (9 df): about 1.2%"),
         "3 vs 10 runs; between-session spread from 10 stored sessions (9 df): about 1.2%"),
        (msg("runs_interleaved", candidate=8, baseline=8, power=POWER),
         ("8 candidate runs interleaved with 8 baseline runs; power at the 5% tolerance 41%; --rounds 14 would reach 80% at "
          "this noise")),
        (POWER, "power at the 5% tolerance 41%; --rounds 14 would reach 80% at this noise"),
        (msg("power_at_tolerance", max_drop=0.05, power=0.93, needed=None, target=0.8), "power at the 5% tolerance 93%"),
        (msg("power_unknown"), "power at the tolerance unknown (no interval); use more --rounds"),
        (msg("runs_per_side_decide", runs=12), "about 12 runs per side would decide it at this noise"),
        (msg("more_runs_decide"), "more runs on both sides would decide it"),
        (msg("decide_new_host", hosts=5),
         ("the history has not seen this host: store sessions from 5 hosts, state --between-host, or use `perfscope ab` (both "
          "revisions on this runner)")),
        (msg("decide_assumed_spread", sessions=1, needed=5),
         ("1 stored session(s) cannot estimate the spread between days: store 5 (`perfscope baseline update`), state "
          "--between-session, or use `perfscope ab`")),
        (msg("decide_more_sessions"),
         "more stored sessions (`perfscope baseline update`), more runs, or `perfscope ab` would decide it"),
        (msg("difference", what="device name", baseline="'A100'", current="'H100'", hint=None),
         "device name: baseline 'A100', current 'H100'"),
        (msg("difference", what="torch version", baseline="'2.4.0'", current="'2.5.1'", hint=msg("hint_torch")),
         ("torch version: baseline '2.4.0', current '2.5.1' (a torch upgrade moves performance by itself: re-record the "
          "baseline (`perfscope baseline update --replace`))")),
        (msg("difference_change", what="usable CPU cores (affinity, cgroup quota)", baseline="2.0", current="4.0"),
         "usable CPU cores (affinity, cgroup quota) 2.0 → 4.0"),
        (msg("not_comparable", changes=[msg("difference_change", what="device name", baseline="'A'", current="'B'")]),
         ("not comparable: device name 'A' → 'B': the baseline's history cannot judge this change of machine; gate with "
          "`perfscope ab` on this runner, record a baseline here (`perfscope baseline update --replace`), or pass "
          "--allow-mismatch")),
        (msg("runs_not_comparable"), "the runs are not comparable (pass --allow-mismatch to compare anyway):"),
        (msg("hint_not_recorded"), "not recorded in one file"),
        (msg("hint_workload_changed"), "the workload file changed; gate a fixed benchmark workload, or pass --allow-mismatch"),
        (msg("hint_world_size"),
         ("a job's throughput is every rank's samples: compare runs of the same torchrun --nnodes × --nproc-per-node, or pass "
          "--allow-mismatch")),
        (msg("hint_batch_size"), "another batch size changes every per-step number"),
        (msg("hint_peak"),
         ("a measured ceiling varies run to run: pass the same --peak-tflops to both analyze runs, or gate on --metric "
          "samples_per_s")),
        (msg("hint_flops"), "MFU is not proportional to throughput across different FLOP counts"),
        (msg("hint_cpu_cores"), "fewer cores slow the data path, the host side and CPU ops: gate on runners of one size"),
        (msg("hint_cpu_model"), "the host CPU feeds the device and runs the data path"),
        (msg("hint_torch"),
         "a torch upgrade moves performance by itself: re-record the baseline (`perfscope baseline update --replace`)"),
        (msg("hint_cuda"), "another CUDA build of torch picks other kernels"),
        (msg("hint_driver"), "drivers change clocks, power management and kernels"),
        (msg("hint_host"), "another machine of the same kind: its offset is what the between-session spread covers"),
        (msg("hint_gpu_uuid"),
         "another physical GPU of the same model (power cap, clocks): covered by the between-session spread"),
        (msg("spread_stated", unit="session", value=0.01), "between-session 1.0% (stated)"),
        (msg("spread_stated", unit="host", value=0.03), "between-host spread 3.0% (stated)"),
        (msg("spread_estimated", unit="session", units=10, df=9, sd=0.012),
         "between-session spread from 10 stored sessions (9 df): about 1.2%"),
        (msg("spread_estimated", unit="host", units=5, df=4, sd=0.006), "between-host spread from 5 hosts (4 df): about 0.6%"),
        (msg("host_spread_above_default", sd=0.08), "between-host spread 8.0% observed, above the default"),
        (msg("host_spread_assumed", default=0.05, hosts=1, needed=5),
         "between-host spread assumed 5% (default: 1 hosts cannot estimate it; 5 can)"),
        (msg("session_spread_assumed", sd=0.0488, sessions=1, needed=5),
         ("between-session spread assumed 5% (1 stored session(s) cannot estimate it: 5 on one host can, or state "
          "--between-session)")),
        (msg("host_not_in_history", host="node-b", hosts=1, spread=msg("host_spread_assumed", default=0.05, hosts=1, needed=5)),
         "node-b is not in the history (1 host(s)): between-host spread assumed 5% (default: 1 hosts cannot estimate it; 5 can)"),
        (msg("host_not_in_history", host="", hosts=2, spread=msg("spread_stated", unit="host", value=0.03)),
         "this host is not in the history (2 host(s)): between-host spread 3.0% (stated)"),
        (msg("run_noise_unknown"), "no session has two runs: the run-to-run noise is unknown"),
        (msg("metric_run_no_metrics", name="baseline", status="crashed"), "run 'baseline' has no metrics (status crashed)"),
        (msg("metric_run_no_window", name="baseline", wall_s=0.0, steps=0),
         "run 'baseline' has no timed window (wall 0.0 s, 0 steps)"),
        (msg("metric_values_invalid", title="MFU", values=[0.0, -1.0]), "MFU: non-positive or non-finite run values [0.0, -1.0]"),
        (msg("mfu_no_flop_count", why=msg("flops_failed", error="FlopCounterMode failed")),
         "MFU unavailable (FLOP counting failed: FlopCounterMode failed); gate on --metric samples_per_s or step_time instead"),
        (msg("mfu_no_flop_count", why=None),
         "MFU unavailable (no FLOP count recorded); gate on --metric samples_per_s or step_time instead"),
        (msg("mfu_no_peak"),
         "MFU unavailable (no peak FLOP/s recorded); re-run analyze with --peak-tflops, or gate on --metric samples_per_s"),
        (msg("job_step_rate_unknown", why=msg("rank_without_window")),
         "the job's step rate is unknown (a rank has no timed window, or its sample count is unknown)"),
        (msg("job_step_rate_unknown", why=None), "the job's step rate is unknown (a rank's window is missing)"),
        (msg("samples_per_s_unavailable", why=None), "samples/s unavailable (not recorded); gate on --metric step_time instead"),
        (msg("gate_metric_unavailable", metric="mfu", error=msg("mfu_no_peak")),
         "mfu: MFU unavailable (no peak FLOP/s recorded); re-run analyze with --peak-tflops, or gate on --metric samples_per_s"),
        (msg("runs_compared", current=3, baseline=10, basis=[msg("spread_stated", unit="session", value=0.01)]),
         "3 vs 10 runs; between-session 1.0% (stated)"),
    ],
    "flops": [
        (msg("cpu_sdpa_formula"), "CPU SDPA has no torch FLOP formula: counted with torch's SDPA formulas by perfscope"),
        (msg("attention_recompute_excluded", share=0.125),
         ("attention backward's QKᵀ recompute (12.5% of the FLOPs counted) is hardware FLOPs only: excluded from model FLOPs "
          "(MFU), kept in HFU")),
        (msg("no_matmul_counted"), "the FLOP counter saw no matmul/conv/attention: MFU is not meaningful for this model"),
        (msg("flops_tp_share", tp=2),
         ("the replica's step ÷ tp = 2 (embeddings, norms and the head, replicated, are computed on every rank: a slight "
          "undercount per rank)")),
        (msg("flops_checkpointing", blocks=4, extra=0.33),
         ("activation checkpointing of 4 blocks: the step as run recomputes +33% FLOPs (counted with checkpointing on: HFU > "
          "MFU)")),
        (msg("flops_pipeline_share", micro=4, accumulation=8, stages=2),
         "the unsplit model's step at micro-batch 4 × 8 ÷ 2 stages (equal blocks per stage)"),
        (msg("flops_scaled", counted=8, per_step=16), "the counted step had 8 samples: scaled to 16 per step"),
        (msg("flops_counted_again", discarded=["step 3", "step 4"]),
         "counted again on a later step, the count of step 3, step 4 being discarded: it was not a training step alone"),
        (msg("flops_counted_in_loop"),
         ("counted on one optimizer step of the loop as it ran: with activation checkpointing the recomputed forward is "
          "included, and this MFU is then a hardware-FLOP figure (pass Profiler(flops_per_step=...))")),
        (msg("flops_fake_tensors", micro=32),
         "FLOPs counted on fake tensors (FakeTensorMode: shapes only, no memory or compute) at micro-batch 32"),
        (msg("flops_fake_failed", error="RuntimeError: no fake kernel", small=4, scale=8.0, micro=32),
         ("fake-tensor FLOP counting failed (RuntimeError: no fake kernel): counted one real micro-step at micro-batch 4 and "
          "scaled ×8 to micro-batch 32 (matmul/conv/attention FLOPs are linear in the batch)")),
        (msg("flops_per_token", low=480, high=2048, mean=1210.5, counted=1024, tokens=9684, batches=8),
         ("sequence length varied in the window (dynamic padding: 480–2048 token positions per micro-batch, mean 1210.5): "
          "FLOPs counted per token on a batch of 1024 and multiplied by the window's 9684 tokens over 8 micro-batches (exact "
          "for weight matmuls; attention's T² term is approximated linearly)")),
        (msg("flops_counted_eagerly"),
         ("torch.compile'd code ran eagerly for the counted step (torch.compiler.set_stance('force_eager')): FLOPs and ops "
          "are those of the eager module underneath, as analyze counts them")),
        (msg("flop_step_discarded", step=3, reason="evaluation"), "step 3 (evaluation inside it)"),
        (msg("flops_counted_again", discarded=[msg("flop_step_discarded", step=3, reason="evaluation")]),
         ("counted again on a later step, the count of step 3 (evaluation inside it) being discarded: it was not a training "
          "step alone")),
    ],
    "hooks": [
        (msg("watch_step_time", before=0.028, after=0.233), "step time 28 ms → 233 ms (+732%)"),
        (msg("watch_data_wait", before=0.02, after=0.35), "data wait 2% → 35% of the step"),
        (msg("watch_recompiles", graphs=3), "3 torch.compile graph(s) compiled since the reference"),
        (msg("watch_data_wait_added", wait=0.012, added=0.015), "the wait for data is 80% of the 15 ms added per step"),
        (msg("clock_throttled", source="SM clock", before=1980.0, after=1410.0, reasons=["hw_thermal_slowdown"]),
         "SM clock 1980 → 1410 MHz (-29%); throttling: hw_thermal_slowdown (NVML)"),
        (msg("clock_throttled", source="SM clock", before=None, after=None, reasons=["sw_power_cap"]),
         "throttling: sw_power_cap (NVML)"),
        (msg("cuda_oom", device=0, held=msg("oom_held", reserved=80 * GiB, live=79 * GiB, blocks=412)),
         ("CUDA out of memory on device 0, at the OOM: 85.9 GB reserved, 84.8 GB in 412 live blocks; who allocated them is "
          "unrecorded (history off)")),
        (msg("oom_held", reserved=3_000_000_000, live=2_500_000_000, blocks=12, requested=512_000_000,
             sites=[["train.py:42", 2_000_000_000]], snapshot="oom.pickle"),
         ("at the OOM: 3 GB reserved, 2.5 GB in 12 live blocks, asking for 512 MB more; most from train.py:42 (2 GB); "
          "snapshot oom.pickle (pytorch.org/memory_viz)")),
        (msg("oom_held", reserved=2048, live=900, blocks=3),
         "at the OOM: 2.05 kB reserved, 900 B in 3 live blocks; who allocated them is unrecorded (history off)"),
        (msg("oom_snapshot_no_cuda"), "no CUDA: no allocator snapshot on out-of-memory"),
        (msg("oom_snapshot_unavailable", error="AttributeError: no _record_memory_history"),
         "allocator snapshot unavailable: AttributeError: no _record_memory_history"),
        (msg("oom_snapshot_failed", error="RuntimeError: boom"), "allocator snapshot failed at the OOM: RuntimeError: boom"),
        (msg("memory_window_profiler_running"), "a torch.profiler was already running on this thread"),
        (msg("memory_window_ended_early"), "the memory window ended before its profiled step"),
    ],
    "search": [
        (msg("knob_not_selected"), "not selected (--only)"),
        (msg("knob_skipped"), "skipped (--skip)"),
        (msg("knob_inapplicable", why="the model already uses SDPA"), "the model already uses SDPA"),
        (msg("knob_note", note="host↔device copy traffic unknown"), "host↔device copy traffic unknown"),
        (msg("not_run"), "not run"),
        (msg("run_failed", status="crashed", error="RuntimeError: boom"), "crashed: RuntimeError: boom"),
        (msg("run_failed", status="timeout", error=None), "timeout: no error text recorded"),
        (msg("knob_not_applied", why="torch.compile compiled no graph"),
         "not applied: torch.compile compiled no graph; the run did not measure this knob"),
        (msg("measured_on_top", reference="dataloader_workers", ratio=1.2, both=1.56),
         "measured on top of dataloader_workers: 1.20× over it (1.56× over the baseline with both)"),
        (msg("paired_micro_batch", micro=64, largest=32, oom=48),
         "paired with micro-batch 64 (without it: fits up to 32, out of memory at 48)"),
        (msg("recipe_not_stacked"), "it changes the training recipe: reported, never stacked into the recommendation"),
        (msg("cannot_tell", confidence=0.95, low=0.97, high=1.04, runs=3, mde=0.05),
         "cannot tell at this machine's noise level (95% interval 0.97–1.04; these 3 run(s) detect changes of about 5% or more)"),
        (msg("cannot_tell", confidence=0.95, low=0.9, high=None, runs=1),
         "cannot tell at this machine's noise level (95% interval 0.90–inf)"),
        (msg("micro_batch_already_fastest"), "the user's micro-batch is already the fastest"),
        (msg("needs_prerequisite", prerequisite="dataloader_workers"),
         "needs dataloader_workers, which produced no acceptable run to build on"),
        (msg("memory_not_limiting", largest=64, title="activation offloading", cost="host↔device copies"),
         "memory did not limit the micro-batch (fits up to 64): activation offloading would only add host↔device copies"),
        (msg("needs_micro_batch_search"), "needs the micro-batch search, which did not run"),
        (msg("sweep_stopped", why=msg("budget_of_exhausted", budget_s=300.0)), "budget of 300 s exhausted"),
        (msg("budget_of_exhausted", budget_s=1.5), "budget of 1.5 s exhausted"),
        (msg("stopped_by_user"), "stopped by the user (Ctrl-C or SIGTERM)"),
        (msg("sweep_stopped_early"), "the sweep stopped early"),
        (msg("lanes_aa_all_dropped"), "every lane failed or was dropped in the A/A check"),
        (msg("lanes_all_lost", dropped={"0": "slurm job 12 CANCELLED before its trial finished", "1": "ray task died"}),
         "every lane was lost: lane 0: slurm job 12 CANCELLED before its trial finished; lane 1: ray task died"),
        (msg("budget_reserved", runs=6),
         ("budget: its last 6 run(s) went to the stacking and the confirmation (this knob could only be reported, not "
          "recommended)")),
        (msg("budget_exhausted"), "budget exhausted"),
        (msg("fastest_of_variants", count=2, tried=["2 workers", "4 workers"]),
         ("the fastest of 2 variants (2 workers, 4 workers): its gain is the selected variant's, which may overstate the true "
          "gain (winner's curse)")),
        (msg("not_reached", why=msg("stopped_by_user")), "not reached: the sweep was stopped by the user (Ctrl-C or SIGTERM)"),
        (msg("did_not_join_stack", name="stack2-compile", failed=True, reason=msg("run_failed", status="crashed", error="E")),
         "did not join the stack: stack2-compile failed (crashed: E)"),
        (msg("stack_not_applied", why="autocast off"), "not applied: autocast off"),
        (msg("stack_not_applied", why=[msg("compile_no_dynamo"), msg("gc_enabled_again")]),
         ("not applied: torch.compile never ran dynamo (the model was not called through the compiled module); the garbage "
          "collector was enabled again during the timed steps (the workload called gc.enable())")),
        (msg("tf32_set_back", trial=True, ran=False),
         "the trial set matmul TF32 on but it was off at the end of the timed steps: the workload's code set it back"),
        (msg("autocast_no_matmul", dtype="bf16", ran=["fp16", "fp32"]),
         ("autocast(bf16) changed no matmul: every matmul ran in fp16, fp32 (the workload's forward disables autocast or "
          "casts its inputs back)")),
        (msg("gc_freeze_undone"),
         "gc.freeze() was undone during the timed steps (no frozen objects left: the workload called gc.unfreeze())"),
        (msg("gc_enabled_again"),
         "the garbage collector was enabled again during the timed steps (the workload called gc.enable())"),
        (msg("compile_no_dynamo"), "torch.compile never ran dynamo (the model was not called through the compiled module)"),
        (msg("compile_no_graph"),
         "torch.compile compiled no graph (dynamo fell back to eager: a backend error suppressed, or every frame skipped)"),
        (msg("knob_unregistered", knobs=["host_pause"]),
         ("no knob host_pause is registered in the trial process: its setting was not applied (add the knob to "
          "perfscope/knobs/__init__.py's REGISTRY)")),
        (msg("env_set_back", changed={"A": ["x", "y"], "B": [None, "z"]}),
         ("A was 'x' in the trial, not 'y': the workload's code set it; B was None in the trial, not 'z': the workload's code "
          "set it")),
        (msg("knob_set_back", why="cudnn.benchmark was off"), "cudnn.benchmark was off"),
        (msg("micro_batch_ended", micro=64, status="timeout"), "micro-batch 64 ended timeout"),
        (msg("micro_batch_memory_margin", micro=64, margin=0.9), "micro-batch 64 uses more than 90% of device memory"),
        (msg("micro_batch_plateau", micro=16), "throughput stopped improving at micro-batch 16"),
        (msg("micro_batch_cap", factor=64), "reached the search cap (64× the starting micro-batch)"),
        (msg("numerics_guard", reason=msg("numerics_no_losses")), "numerics guard: no losses to compare"),
        (msg("numerics_rejected", reason=msg("numerics_nonfinite"), steps=steps),
         ("numerics guard: the loss became non-finite (inf/NaN): overflow or a broken configuration; compared global steps "
          "2–7 (samples 32–127 of the data stream, after the same updates)")),
        (msg("numerics_within", method="step by step", steps=steps, diff=0.0, tolerance=0.02),
         ("numerics guard: losses at global steps 2–7 (samples 32–127 of the data stream, after the same updates) within 0.0% "
          "of the baseline's (tolerance 2%)")),
        (msg("numerics_within", method="loss level", steps=msg("numerics_steps", first=2, last=2), diff=None, tolerance=0.04),
         ("numerics guard: mean loss over global step 2 (after the same number of updates; other samples per step) compared "
          "of the baseline's (tolerance 4%)")),
        (msg("numerics_steps", first=0, last=5, global_steps=False),
         "measured steps 0–5 (global steps not recorded by the perfscope that ran them)"),
        (msg("numerics_no_losses"), "no losses to compare"),
        (msg("numerics_nonfinite"), "the loss became non-finite (inf/NaN): overflow or a broken configuration"),
        (msg("numerics_step_loss", step=2, global_steps=True, loss=2.12, baseline=1.12, diff=0.893, tolerance=0.02),
         "loss at global step 2 is 2.12 vs baseline 1.12 (89.3% apart; tolerance 2%)"),
        (msg("numerics_grad_norm", norm=2.0, baseline=1.0, tolerance=0.04),
         "first-step gradient norm 2 vs baseline 1 (tolerance 4%)"),
        (msg("numerics_mean_loss", loss=1.2, baseline=1.0, diff=0.2, tolerance=0.04),
         "mean loss 1.2 vs baseline 1 (20.0% apart; tolerance 4% for a different micro-batch/accumulation)"),
        (msg("numerics_accumulation_grad_norm", norm=4.0, baseline=1.0, tolerance=0.25),
         ("first-step gradient norm 4 vs baseline 1 with the same global batch (tolerance 25%): is the loss divided by the "
          "accumulation steps?")),
        (msg("numerics_recipe_loss", optimizer="adafactor", loss=1.1, baseline=1.0, diff=0.1, tolerance=0.04),
         ("with adafactor the mean loss over the compared steps is 1.1 vs baseline 1 (10.0% higher; tolerance 4%): it trains "
          "slower at this learning rate")),
        (msg("numerics_recipe_grad_norm", norm=2.0, baseline=1.0, tolerance=0.04),
         ("first-step gradient norm 2 vs baseline 1 (tolerance 4%): it is taken before any optimizer step, so the model or "
          "the loss differs, not just the optimizer")),
        (msg("layout_3d"), "TP × PP together (3-D) is not run by perfscope"),
        (msg("layout_dp_pp"), "pipeline stages replicated across data-parallel ranks (DP × PP) are not run by perfscope"),
        (msg("layout_split_unknown"), "the probe could not read how the model splits"),
        (msg("layout_tp_inapplicable", why=msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8)),
         "n_heads = 4 heads is not divisible by tp = 8"),
        (msg("tp_unknown_styles", bad={"blocks.0.qkv": "diagonal"}, styles=["colwise", "rowwise"]),
         "Workload.tensor_parallel_plan: unknown style(s) {'blocks.0.qkv': 'diagonal'}; use one of ('colwise', 'rowwise')"),
        (msg("tp_no_repeated_blocks"), "no repeated blocks (an nn.ModuleList of same-type layers) to split"),
        (msg("tp_heads_indivisible", attr="n_heads", heads=4, tp=8), "n_heads = 4 heads is not divisible by tp = 8"),
        (msg("tp_packed_qkv", name="qkv", fan_in=128, fan_out=384),
         ("packed q/k/v projection 'qkv' (128 → 384): its rows are [q; k; v], so a column split would give rank 0 all of q "
          "and half of k; use separate q/k/v Linears or give Workload.tensor_parallel_plan")),
        (msg("tp_no_projections", block="Block"),
         ("no attention (q/k/v + output) or MLP (up + down) projections recognised in the repeated block Block; give "
          "Workload.tensor_parallel_plan")),
        (msg("tp_features_indivisible", name="mlp.0", width=6, tp=4), "'mlp.0' has 6 features to split, not divisible by tp = 4"),
        (msg("tp_head_features_indivisible", name="q", width=96, head_dim=32, tp=2),
         "'q': 96 features = 3 heads of 32, not divisible by tp = 2"),
        (msg("layout_no_tp_plan", tp=2), "no TP plan was derived for tp = 2"),
        (msg("layout_layers_indivisible", layers=3, pp=2), "3 layers are not divisible by pp = 2"),
        (msg("layout_tp_spans_nodes", tp=4, per_node=2),
         "tp = 4 spans nodes (2 ranks per node): a TP all-reduce per block in forward and backward on the inter-node network"),
        (msg("layout_wraps_model"), "the workload wraps its own model (Workload.wraps_model=True)"),
        (msg("layout_batch_indivisible", batch=6, microbatches=4), "the replica's batch 6 does not split into 4 micro-batches"),
        (msg("layout_would_not_fit", state=90 * GiB, limit=80 * GiB, share=0.9),
         "90.0 GiB of training state per rank, more than 90% of the 80.0 GiB a rank may hold"),
        (msg("layout_bubble", bubble=1 / 3, microbatches=2, limit=0.25),
         ("(p − 1) / (m + p − 1) = 33% idle with 2 micro-batches (above 25%); the same pipeline with more micro-batches is "
          "measured")),
        (msg("layout_pipeline_no_checkpointing"), "pipeline trials run without activation checkpointing"),
        (msg("layout_checkpointing_not_needed"),
         ("the state fits without it: checkpointing would only add recompute (measured only where the same layout runs out of "
          "memory)")),
        (msg("layout_not_measured", why="the analysis was interrupted before it ran"),
         "not measured: the analysis was interrupted before it ran"),
        (msg("layout_trial_limit"), "not measured: the layout search's trial limit was reached"),
        (msg("layout_under_load", load=msg("contended", why=["the hypervisor stole 0.50 cores"])),
         "measured under load (contended: the hypervisor stole 0.50 cores): compare with care"),
        (msg("lane_aa_outlier", level=0.689, limit=1.25),
         "A/A outlier: its baseline ran at 0.69× the median lane's (the limit is 1.25×): dropped before the sweep"),
        (msg("lanes_fix_numa"), "the lanes fix each run's cores, NUMA node by node"),
    ],
    "structure": [
        (msg("structure_syncs", op="aten::_local_scalar_dense (.item())", sites=["m.py:42"], before=0, after=1),
         "+1 host sync per step: aten::_local_scalar_dense (.item()) at m.py:42 (0 → 1)"),
        (msg("structure_syncs", op="aten::item", sites=[], before=3, after=1),
         "-2 host syncs per step: aten::item at an unknown site (3 → 1)"),
        (msg("structure_window_syncs", site="train.py:42", before=0.0, after=0.1, counts=[[0, 40], [4, 40]]),
         ("+0.1 host syncs per step over the timed window (about 1 every 10 steps): a synchronizing CUDA call at train.py:42 "
          "(0 in 40 steps → 4 in 40 steps)")),
        (msg("structure_window_syncs", site="", before=0.2, after=0.1, counts=[[8, 40], [4, 40]]),
         ("-0.1 host syncs per step over the timed window: a synchronizing CUDA call at an unknown site (8 in 40 steps → 4 in "
          "40 steps)")),
        (msg("structure_flops", before=292864.0, after=489472.0, by_op={"aten::mm": 0.711, "aten::addmm": 0.604}),
         "FLOPs per step +67% (aten::mm +71%, aten::addmm +60%): 2.929e+05 → 4.895e+05"),
        (msg("structure_flops", before=0.0, after=1000.0,
             by_op={"aten::mm": float("inf"), "aten::a": 1, "aten::b": 1, "aten::c": 1}),
         "FLOPs per step new (aten::mm +inf%, aten::a +100%, aten::b +100%, 1 more): 0 → 1000"),
        (msg("structure_dtypes", before={"bf16": 1.0}, after={"bf16": 0.9, "fp32": 0.1}, moved=["bf16", "fp32"]),
         "matmul FLOPs in bf16 100% → 90% (fp32 0% → 10%)"),
        (msg("structure_dtypes", before={"fp32": 1.0}, after={"fp32": 0.5}, moved=["fp32"]), "matmul FLOPs in fp32 100% → 50%"),
        (msg("structure_graph_breaks", before=0, after=3,
             reasons={"Call to `torch._dynamo.graph_break()`": 1, "data-dependent branch": 2}, graphs=[1, 2]),
         "graph breaks 0 → 3 (reason: Call to `torch._dynamo.graph_break()`; data-dependent branch ×2), graphs 1 → 2"),
        (msg("structure_graph_breaks", before=2, after=1, reasons={}, graphs=[3, 3]), "graph breaks 2 → 1"),
        (msg("structure_recompiles", before=0, after=2), "recompiles 0 → 2"),
        (msg("structure_op_calls", before=100, after=120, delta={"aten::_to_copy": 20}),
         "op calls per step 100 → 120 (aten::_to_copy +20)"),
        (msg("structure_launches", name="compute kernels", before=312, after=655), "kernel launches per step 312 → 655"),
        (msg("structure_launches", name="memcpy", before=2, after=4), "memcpy per step 2 → 4"),
        (msg("structure_copies", kind="h2d pageable", counts=[0, 1], sizes=[0, 3 * 2**20]),
         "H2D pageable copies per step 0 → 1 (0 B → 3.0 MiB)"),
        (msg("structure_memory", before=1000 * 2**20, after=1100 * 2**20, tolerance=0.02),
         "allocator peak 1000.0 MiB → 1.1 GiB (+10%, beyond its ±2% run-to-run tolerance)"),
        (msg("structure_not_compared", notes=[msg("no_fingerprint", side="baseline")]),
         ("structure not compared (the baseline has no structural fingerprint (recorded by an older perfscope, or counting "
          "failed))")),
        (msg("no_structural_change_found"),
         ("no structural change found (syncs, FLOPs, dtypes, compile, op calls, copies and memory as in the baseline): look "
          "at the data path, the trace or the machine")),
        (msg("structural_changes",
             changes=[msg("structure_recompiles", before=0, after=2), msg("structure_launches", name="memcpy", before=2, after=4)]),
         "structural changes: recompiles 0 → 2; memcpy per step 2 → 4"),
        (msg("moved_sync_sites", op="aten::item", count=2, sites=["a.py:1", "b.py:2"]),
         "aten::item: 2 per step as before, at moved call sites (a.py:1, b.py:2)"),
        (msg("side_not_compiled", side="baseline"), "the baseline is not compiled: graph breaks and recompiles not compared"),
        (msg("side_not_compiled", side="current"), "the current run is not compiled: graph breaks and recompiles not compared"),
        (msg("no_fingerprint", side="current"),
         "the current run has no structural fingerprint (recorded by an older perfscope, or counting failed)"),
        (msg("memory_not_gated", both=True), "memory: no allocator peak on both sides (CUDA only): not gated"),
        (msg("memory_not_gated", both=False), "memory: no allocator peak on one side (CUDA only): not gated"),
        (msg("fingerprints_differ", role="baseline", runs=5, variants=2),
         "baseline: the structural fingerprints of its 5 runs differ (2 variants): the most common one is compared"),
        (msg("compile_facts", graphs=2, graph_breaks=1, reasons=["Call to `torch._dynamo.graph_break()`"], recompiles=0),
         "torch.compile: 2 graphs, 1 graph break (reason: Call to `torch._dynamo.graph_break()`), 0 recompiles"),
        (msg("compile_facts", graphs=1, graph_breaks=0, reasons=[], recompiles=1),
         "torch.compile: 1 graph, 0 graph breaks, 1 recompile"),
        (msg("data_wait_moved", before=0.18, after=0.02), "exposed data wait 18% → 2% of wall time"),
        (msg("measured_change", change=msg("data_wait_moved", before=0.18, after=0.02)),
         "exposed data wait 18% → 2% of wall time (measured)"),
        (msg("no_structural_change_counted"),
         "no structural change counted (same syncs, FLOPs, dtypes, op calls and copies as the baseline)"),
        (msg("configuration_no_fingerprint", name="baseline", baseline=True),
         "the baseline (baseline) has no structural fingerprint (recorded by an older perfscope, or counting failed)"),
        (msg("configuration_no_fingerprint", name="amp_bf16", baseline=False),
         "amp_bf16 has no structural fingerprint (recorded by an older perfscope, or counting failed)"),
        (msg("eager_op_count"),
         ("op calls are counted on the eager step (torch.compile does not trace under the counting dispatch mode); what "
          "compiling removed shows as kernel launches of traced CUDA runs")),
        (msg("per_step_batch_differs", batch=64, baseline=32),
         "per step of 64 samples against the baseline's 32: per-step counts scale with the batch"),
    ],
    "wording": [
        (msg("trace_not_captured", notes=[msg("trace_empty"), msg("trace_unavailable")]),
         "the profiler produced an empty trace; trace unavailable"),
    ],
}
"""Catalogue -> (message, its words); "wording": templates of WORDING's own (perfscope/wording/__init__.py)."""

CATALOGUES = {name: getattr(importlib.import_module(f"perfscope.wording.{name}"), name.upper())
              for _, name, _ in pkgutil.iter_modules(perfscope.wording.__path__) if not name.startswith("_")}
"""Every catalogue module (a private one, e.g. _text.py, holds helpers the catalogues share)."""
ALL = [(name, message, said) for name, cases in CASES.items() for message, said in cases]


@pytest.mark.parametrize(("message", "said"), [(m, s) for _, m, s in ALL], ids=[f"{n}:{m.code}" for n, m, _ in ALL])
def test_each_template_says_what_it_said_as_prose(message: Message, said: str) -> None:
    assert words(message) == said


@pytest.mark.parametrize("name", sorted(CATALOGUES))
def test_every_template_of_a_catalogue_has_a_case_under_its_name(name: str) -> None:
    assert set(CATALOGUES[name]) == {m.code for m, _ in CASES.get(name, [])}


# ------------------------------------------------------------------------ the gate's outputs show the words


@pytest.mark.parametrize("render", [render_table, render_markdown, render_junit])
def test_each_output_shows_the_verdicts_and_the_errors_words(render) -> None:
    base = make_results(make_runs(runs=5, seed=1))
    slower = run_gate(make_results(make_runs(runs=5, median_s=0.125, seed=2)), base, GateOptions(between_session=0.0))
    (verdict,) = slower.verdicts
    assert verdict.status == "regression" and words(verdict.message) in render(slower)
    missing = run_gate(base, base, GateOptions(trial="amp_bf16"))
    said = words(msg("gate_no_run", role="baseline", configuration="amp_bf16", known=["baseline"]))
    assert missing.errors[0].message.code == "gate_no_run" and said in render(missing)


@pytest.mark.parametrize("render", [render_table, render_markdown, render_junit])
def test_each_output_shows_a_refusing_differences_words(render) -> None:
    base = make_results(make_runs(runs=5, seed=1))
    cur = make_results(make_runs(runs=5, seed=2))
    cur.environment.torch_version = "9.9.9"
    report = run_gate(cur, base, GateOptions(between_session=0.0))
    (difference,) = report.blocking_differences
    assert report.outcome == "not_comparable" and difference.hint == msg("hint_torch")
    shown = render(report)
    assert words(msg("not_comparable", changes=[difference.change])) in shown.replace("&gt;", ">")
    assert words(difference.message) in shown

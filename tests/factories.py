"""Builders of small, realistic Results objects for tests of the stages after measurement."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from perfscope.measure.window import StepRecord, assemble_metrics
from perfscope.results import (
    Environment,
    GpuTimeline,
    IdleBreakdown,
    KernelFacts,
    KernelStat,
    LaunchFacts,
    PageableCopies,
    Peak,
    Results,
    SyncFacts,
    TraceFacts,
    Trial,
    Utilization,
    Window,
    WorkloadInfo,
)
from perfscope.results.config import TrialConfig
from perfscope.results.messages import Message, msg
from perfscope.stats import summarize


def load(cores: float = 1.9, cpus: int = 2) -> Message:
    """A window's contention reason: ``cores`` of other processes on a run that may use ``cpus`` CPUs."""
    return msg("contention", parts=[msg("other_processes_busy", cores=cores, cpus=cpus, beyond_quota=0)])


def contended(cores: float = 1.9, cpus: int = 2) -> Message:
    """A run's exclusion for the load of ``load(cores, cpus)`` (perfscope.trial.session)."""
    return msg("contended", why=[load(cores, cpus)])


def make_environment(device_type: str = "cuda", device_name: str = "NVIDIA H100 80GB HBM3") -> Environment:
    return Environment(
        device_type=device_type,
        device_name=device_name,
        device_count=1 if device_type == "cuda" else 0,
        torch_version="2.13.0",
        python_version="3.11.7",
        cpu_model="Test CPU",
        cpu_cores_logical=16,
    )


def make_step_times(median_s: float, n: int = 30, noise: float = 0.02, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median_s * (1 + rng.gauss(0, noise)) for _ in range(n)]


def make_trial(
    name: str = "baseline",
    *,
    median_s: float = 0.1,
    n: int = 30,
    noise: float = 0.02,
    seed: int = 0,
    flops_per_step: float = 4e13,
    peak_tflops: float = 989.4,
    batch: int = 8,
    data_wait_fraction: float = 0.0,
    status: str = "ok",
    knobs: list[str] | None = None,
) -> Trial:
    config = TrialConfig(micro_batch_size=batch)
    if status != "ok":
        return Trial(name=name, config=config, status=status, error=f"{status} in test", knobs=knobs or [])
    times = make_step_times(median_s, n, noise, seed)
    wall = sum(times)
    window = Window(steps=n, samples=n * batch, wall_s=wall, data_wait_s=wall * data_wait_fraction, host_data_wait_s=wall * data_wait_fraction)
    records = [StepRecord(index=i, time_s=t, data_wait_s=t * data_wait_fraction, host_data_wait_s=t * data_wait_fraction, samples=batch, micro_steps=1) for i, t in enumerate(times)]
    metrics = assemble_metrics([window], records, micro_batch_size=batch, grad_accum_steps=1, warmup_steps=3)
    rate = flops_per_step * n / wall
    metrics.flops_per_step = metrics.hardware_flops_per_step = flops_per_step
    metrics.achieved_tflops = rate / 1e12
    metrics.mfu = metrics.hfu = rate / (peak_tflops * 1e12)
    metrics.peak_memory_bytes = 10 * 2**30
    metrics.device_memory_capacity_bytes = 80 * 2**30
    metrics.utilization = Utilization()
    return Trial(name=name, config=config, status="ok", metrics=metrics, knobs=knobs or [])


def make_trial_from_step_times(
    name: str,
    times: list[float],
    *,
    flops_per_step: float = 4e13,
    peak_tflops: float = 989.4,
    batch: int = 8,
    knobs: list[str] | None = None,
) -> Trial:
    """A successful run whose timed window is exactly these step times (e.g. a bimodal, stalling loop)."""
    config = TrialConfig(micro_batch_size=batch)
    n, wall = len(times), sum(times)
    window = Window(steps=n, samples=n * batch, wall_s=wall)
    records = [StepRecord(index=i, time_s=t, data_wait_s=0.0, host_data_wait_s=0.0, samples=batch, micro_steps=1) for i, t in enumerate(times)]
    metrics = assemble_metrics([window], records, micro_batch_size=batch, grad_accum_steps=1, warmup_steps=3)
    rate = flops_per_step * n / wall
    metrics.flops_per_step = metrics.hardware_flops_per_step = flops_per_step
    metrics.achieved_tflops = rate / 1e12
    metrics.mfu = metrics.hfu = rate / (peak_tflops * 1e12)
    metrics.utilization = Utilization()
    return Trial(name=name, config=config, status="ok", metrics=metrics, knobs=knobs or [])


def make_runs(
    configuration: str = "baseline",
    *,
    runs: int = 5,
    median_s: float = 0.1,
    run_cv: float = 0.03,
    run_factors: list[float] | None = None,
    n: int = 30,
    noise: float = 0.02,
    seed: int = 0,
    first_sequence: int = 1,
    stall_every: int = 0,
    stall_s: float = 0.0,
    **trial_kwargs,
) -> list[Trial]:
    """Several runs (fresh processes) of one configuration, named cfg, cfg-r2, ... as analyze --repeat names them.

    Runs of the same code differ by more than their steps do (clocks, neighbours, memory layout): each run's
    step times are scaled by a run factor, log-normal with spread ``run_cv`` (or exactly ``run_factors``), on
    top of the per-step ``noise``. ``stall_every`` adds ``stall_s`` to every k-th step (a periodic stall: the
    median step is unchanged, throughput drops).
    """
    rng = random.Random(seed)
    factors = run_factors if run_factors is not None else [math.exp(rng.gauss(0, run_cv)) for _ in range(runs)]
    trials = []
    for i, factor in enumerate(factors):
        times = make_step_times(median_s * factor, n, noise, seed=seed * 1000 + i)
        if stall_every:
            times = [t + stall_s if (k + 1) % stall_every == 0 else t for k, t in enumerate(times)]
        trial = make_trial_from_step_times(configuration if i == 0 else f"{configuration}-r{i + 1}", times, **trial_kwargs)
        trial.configuration, trial.repeat, trial.sequence = configuration, i + 1, first_sequence + i
        trials.append(trial)
    return trials


def make_results(trials: list[Trial] | None = None, *, device_type: str = "cuda") -> Results:
    return Results(
        perfscope_version="0.1.0",
        created_at="2026-11-22T00:00:00Z",
        command=["perfscope", "analyze", "examples/tiny_transformer.py"],
        environment=make_environment(device_type),
        workload=WorkloadInfo(path="examples/tiny_transformer.py", sha256="0" * 64, name="tiny_transformer"),
        peak=Peak(tflops=989.4, dtype="bf16", source="datasheet: NVIDIA H100 SXM (dense)"),
        trials=trials if trials is not None else [make_trial()],
    )


# ------------------------------------------------------------------------------ a full analyze run


def make_utilization(seconds: float = 30.0, n: int = 300, *, gpu_util: float = 60.0, seed: int = 0) -> Utilization:
    """A timeline of NVML + host samples, as the sampler records it (bounded, evenly spaced)."""
    from perfscope.results import UtilizationSample

    rng = random.Random(seed)
    samples = [
        UtilizationSample(
            t_s=i * seconds / n,
            gpu_util_percent=min(100.0, max(0.0, gpu_util + rng.gauss(0, 8))),
            gpu_memory_used_bytes=int(20 * 2**30 + rng.random() * 2**30),
            power_w=250 + gpu_util * 4 + rng.gauss(0, 20),
            sm_clock_mhz=1980 - rng.random() * 60,
            cpu_percent=min(100.0, max(0.0, 35 + rng.gauss(0, 6))),
        )
        for i in range(n)
    ]
    gpu = [s.gpu_util_percent for s in samples]
    return Utilization(gpu_util_percent=summarize(gpu), cpu_percent=summarize([s.cpu_percent for s in samples]), samples=samples)


def make_trace_facts(
    kernel_name: str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", scale: float = 1.0, **changes: Any
) -> TraceFacts:
    """Trace facts of a GPU-bound bf16 transformer step, as perfscope.trace writes them; ``changes`` replace
    top-level fields (``gpu=None``, ``gemm_shapes=[...]``)."""
    step = 0.12 * scale
    idle = 0.22 / scale
    facts = TraceFacts(
        device_type="cuda",
        steps=3,
        step_time_s=step,
        data_wait_fraction=0.02,
        kernels=KernelFacts(
            source="kernels",
            time_by_category={"gemm": 0.061 * scale, "attention": 0.021 * scale, "elementwise": 0.017, "normalization": 0.006, "memcpy": 0.003},
            top=[
                KernelStat(name=kernel_name, time_s=0.041 * scale, count=240, category="gemm"),
                KernelStat(name="flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", time_s=0.013 * scale, count=120, category="attention"),
                KernelStat(name="at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", time_s=0.007, count=480, category="elementwise"),
                KernelStat(name="cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>", time_s=0.005, count=96,
                           category="gemm"),
                KernelStat(name="at::native::reduce_kernel<512, 1, ReduceOp<float, NormTwoOps>>", time_s=0.004, count=60, category="elementwise"),
            ],
            fp32_gemm_fraction=0.0,
        ),
        launch=LaunchFacts(launch_bound=False, kernels_per_step=1200, median_kernel_us=18.0, host_launch_s=0.006, host_active_s=0.03,
                           starved_fraction=0.01),
        sync=SyncFacts(points_per_step=1, events_per_step={"aten::item": 1, "aten::_local_scalar_dense": 1, "cudaStreamSynchronize": 1},
                       blocked_fraction=0.05),
        gpu=GpuTimeline(busy_fraction=1 - idle, idle_fraction=idle, busy_s=step * (1 - idle),
                        idle=IdleBreakdown(data_wait_s=step * 0.02, sync_s=step * (idle - 0.03), host_s=step * 0.01, other_s=0.0)),
        pageable_memcpy=PageableCopies(count=0, bytes=0, time_s=0),
    )
    return dataclasses.replace(facts, **changes)


def make_full_results(
    *,
    workload_name: str = "tiny_transformer",
    kernel_name: str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
    trial_prefix: str = "",
) -> Results:
    """An analyze run with every report section populated: sweep, micro-batch curve with an OOM, findings,
    failures, utilization timelines, trace facts and a memory breakdown. Names are parameters so escaping
    tests can inject markup into them."""
    from perfscope.results import (
        Finding,
        Gain,
        KnobOutcome,
        MemoryBreakdown,
        MicroBatchPoint,
        Sweep,
    )
    p = trial_prefix
    base = make_trial(f"{p}baseline", median_s=0.120, seed=1, data_wait_fraction=0.18)
    amp = make_trial(f"{p}amp_bf16", median_s=0.085, seed=2, data_wait_fraction=0.2, knobs=["amp_bf16"])
    workers = make_trial(f"{p}dataloader_workers", median_s=0.101, seed=3, data_wait_fraction=0.02, knobs=["dataloader_workers"])
    chl = make_trial(f"{p}channels_last", median_s=0.1195, seed=4, noise=0.05, data_wait_fraction=0.18, knobs=["channels_last"])
    rec = make_trial(f"{p}recommended", median_s=0.064, seed=5, data_wait_fraction=0.03, knobs=["amp_bf16", "dataloader_workers"])
    mb16 = make_trial(f"{p}mb16", median_s=0.118, seed=6, batch=16, flops_per_step=8e13, knobs=["amp_bf16", "dataloader_workers"])
    mb32 = make_trial(f"{p}mb32", median_s=0.225, seed=7, batch=32, flops_per_step=16e13, knobs=["amp_bf16", "dataloader_workers"])
    mb64 = make_trial(f"{p}mb64", status="oom", batch=64, knobs=["amp_bf16", "dataloader_workers"])
    mb64.error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB (GPU 0; 79.10 GiB total capacity)"
    compiled = make_trial(f"{p}torch_compile", status="crashed", knobs=["torch_compile"])
    compiled.error = "Traceback (most recent call last):\n  File \"child.py\", line 42, in run\n    model = torch.compile(model)\ntorch._dynamo.exc.BackendCompilerFailed: inductor raised RuntimeError: triton not found"
    fused = make_trial(f"{p}fused_adamw", status="skipped", knobs=["fused_adamw"])
    fused.error = "skipped: the search budget was exhausted"

    for t, mem in ((base, 38), (amp, 26), (workers, 38), (chl, 38), (rec, 26), (mb16, 45), (mb32, 71)):
        t.metrics.peak_memory_bytes = mem * 2**30
        t.metrics.tokens_per_s = t.metrics.samples_per_s * 1024
    base.metrics.memory_breakdown = MemoryBreakdown(parameters=4 * 2**30, gradients=4 * 2**30, optimizer_state=8 * 2**30, activations_and_temporaries=22 * 2**30)
    rec.metrics.memory_breakdown = MemoryBreakdown(parameters=4 * 2**30, gradients=4 * 2**30, optimizer_state=8 * 2**30, activations_and_temporaries=10 * 2**30)
    base.metrics.utilization = make_utilization(gpu_util=58, seed=1)
    rec.metrics.utilization = make_utilization(gpu_util=91, seed=2)
    base.metrics.trace_facts = make_trace_facts(kernel_name)
    rec.metrics.trace_facts = make_trace_facts(kernel_name, scale=0.6)
    base.metrics.trace_path = f"traces/{p}baseline.pt.trace.json.gz"
    rec.metrics.trace_path = f"traces/{p}recommended.pt.trace.json.gz"
    for t, wall in ((base, 41.0), (amp, 33.5), (workers, 37.2), (chl, 40.8), (rec, 29.9), (mb16, 38.1), (mb32, 52.3), (mb64, 12.0), (compiled, 95.0)):
        t.wall_time_s = wall

    def gain(candidate: Trial) -> Gain:
        ratio = candidate.metrics.samples_per_s / base.metrics.samples_per_s
        low, high = ratio * 0.97, ratio * 1.03
        verdict = "faster" if low > 1.02 else "slower" if high < 0.98 else "same" if low > 0.98 and high < 1.02 else "undecided"
        return Gain(ratio=ratio, low=low, high=high, confidence=0.99, verdict=verdict, runs=3, reference_runs=4, method="paired runs (test)")

    sweep = Sweep(
        baseline_trial=base.name,
        recommended_trial=rec.name,
        recommended_knobs=["amp_bf16", "dataloader_workers"],
        recommended_gain=gain(rec),
        knobs=[
            KnobOutcome(knob="amp_bf16", title="bf16 autocast", status="measured", trial=amp.name, gain=gain(amp), mfu=amp.metrics.mfu, changes_semantics=[msg("numerics", change=msg("bf16_matmuls"))]),
            KnobOutcome(knob="dataloader_workers", title="DataLoader workers + pinned memory", status="measured", trial=workers.name, gain=gain(workers), mfu=workers.metrics.mfu),
            KnobOutcome(knob="channels_last", title="channels_last memory format", status="measured", trial=chl.name, gain=gain(chl), mfu=chl.metrics.mfu),
            KnobOutcome(knob="torch_compile", title="torch.compile", status="failed", trial=compiled.name, reason=[msg("run_failed", status="crashed", error="inductor raised RuntimeError")]),
            KnobOutcome(knob="fused_adamw", title="fused AdamW", status="skipped", reason=[msg("budget_exhausted")]),
            KnobOutcome(knob="flash_attention", title="scaled_dot_product_attention", status="inapplicable", reason=[msg("knob_inapplicable", why="the model already uses SDPA")]),
        ],
        micro_batch=[
            MicroBatchPoint(micro_batch_size=8, grad_accum_steps=1, trial=rec.name, status="ok", samples_per_s=rec.metrics.samples_per_s, peak_memory_bytes=26 * 2**30),
            MicroBatchPoint(micro_batch_size=16, grad_accum_steps=1, trial=mb16.name, status="ok", samples_per_s=mb16.metrics.samples_per_s, peak_memory_bytes=45 * 2**30),
            MicroBatchPoint(micro_batch_size=32, grad_accum_steps=1, trial=mb32.name, status="ok", samples_per_s=mb32.metrics.samples_per_s, peak_memory_bytes=71 * 2**30),
            MicroBatchPoint(micro_batch_size=64, grad_accum_steps=1, trial=mb64.name, status="oom"),
        ],
        budget_s=900.0,
        elapsed_s=431.5,
        notes=[msg("gain_from_confirmation", runs=3, selection=2)],
    )
    findings = [
        Finding(
            rule_id="PS101",
            title="Matmuls run in fp32: use bf16 autocast",
            severity="high",
            evidence=["78 % of device time is in fp32 GEMMs", "the device's bf16 peak is 15× its fp32 peak"],
            fix="@@ train.py @@\n-    loss = model(batch)\n+    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n+        loss = model(batch)",
            gain=sweep.knobs[0].gain,
            caveats=[msg("numerics", change=msg("bf16_matmuls"))],
            reference="https://pytorch.org/docs/stable/amp.html",
            trial=amp.name,
        ),
        Finding(
            rule_id="PS201",
            title="The GPU waits for data: add DataLoader workers",
            severity="medium",
            evidence=["18 % of each step is spent blocked on the data iterator", "num_workers=0"],
            fix="-loader = DataLoader(ds, batch_size=8)\n+loader = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)",
            gain=sweep.knobs[1].gain,
            trial=workers.name,
        ),
        Finding(
            rule_id="PS305",
            title="GEMM shapes not multiples of 8: pad the vocabulary",
            severity="low",
            evidence=["vocab_size=50257 gives misaligned output-projection GEMMs (micro-benchmark: 1.3× slower than 50304)"],
            fix="-vocab_size = 50257\n+vocab_size = 50304  # next multiple of 64",
            estimated_gain=1.04,
            estimate_method="GEMM alignment micro-benchmark scaled by the layer's share of step time",
            caveats=[msg("padded_vocabulary")],
        ),
        Finding(
            rule_id="PS140",
            title="Convolutions in NCHW: try channels_last",
            severity="low",
            evidence=["conv2d kernels account for 4 % of device time"],
            fix="+model = model.to(memory_format=torch.channels_last)",
            gain=sweep.knobs[2].gain,
            trial=chl.name,
        ),
    ]
    results = make_results([base, amp, workers, chl, compiled, fused, rec, mb16, mb32, mb64])
    results.workload = WorkloadInfo(
        path=f"examples/{workload_name}.py", sha256="ab" * 32, name=workload_name, declared={"batch_size": 8, "tokens_per_sample": 1024}, parameter_count=124_000_000
    )
    results.environment.device_memory_bytes = 80 * 2**30
    results.environment.driver_version = "550.54.15"
    results.environment.cuda_version = "12.4"
    results.environment.datasheet_peaks_tflops = {"bf16": 989.4, "fp32": 67.0}
    results.environment.datasheet_source = "https://www.nvidia.com/en-us/data-center/h100/"
    results.environment.platform = "Linux-6.5.0-x86_64-with-glibc2.35"
    results.environment.hostname = "gpu-node-07"
    results.sweep = sweep
    results.findings = findings
    results.command = ["perfscope", "analyze", f"examples/{workload_name}.py", "--out", "perfscope-out"]
    return results

"""Profiler traces: capture a short window, turn it into per-step facts, benchmark GEMM alignment.

    with TraceCapture(out_dir / "trace.json.gz", device="cuda") as cap:   # capture.py
        for _ in range(cap.total_steps):
            train_step(); cap.step()
    facts = trace_facts(cap.path, device_type="cuda", steps=cap.active_steps)   # facts.py

The facts dict is stored as ``TrialMetrics.trace_facts`` (JSON) and read by the rules (perfscope.rules)
and the report (perfscope.report.facts). Its keys are a contract; all times are seconds PER PROFILED STEP
unless named otherwise, fractions are of the mean profiled step time, a key whose value cannot be known
is absent or None:

    device_type                 "cuda" | "cpu"
    steps                       number of profiled (active) steps
    step_time_s                 mean wall time of a profiled step (ProfilerStep#N spans)
    gpu_busy_fraction           union of kernel + memcpy/memset time on the GPU / step time   (cuda)
    gpu_idle_fraction           1 - gpu_busy_fraction                                           (cuda)
    idle_breakdown              {"data_wait", "sync", "launch_bound", "other"}: seconds of GPU idle attributed
    data_wait_fraction          time in "perfscope::data" record_function spans / step time
    sync_fraction               host time in synchronizing calls / step time
    sync_events_per_step        {"aten::item": n, "aten::_local_scalar_dense": n, "cudaStreamSynchronize": n, ...}
    kernel_count_per_step       launched kernels per step (on CPU: aten ops per step)
    median_kernel_us            median kernel duration (on CPU: median aten op self time)
    cpu_launch_time_per_step_s  host time in cudaLaunchKernel-like runtime calls per step        (cuda)
    tiny_op_time_fraction       share of aten op self time in ops < 20 µs                        (cpu)
    launch_bound                True when many short kernels and host time ≥ device busy time
                                 (on CPU: many tiny aten ops — dispatch-bound)
    pageable_memcpy             {"count", "bytes", "time_s"} per step of Pageable HtoD copies   (cuda)
    kernel_time_by_category     {"gemm", "conv", "attention", "elementwise", "normalization", "optimizer",
                                 "memcpy", "memset", "communication", "other": seconds per step}
                                 (on CPU: self CPU time of aten ops by the same categories)
    fp32_matmul_fraction        share of gemm time in non-tensor-core fp32 kernels (cuda); None on CPU
    top_kernels                 [{"name", "time_s", "count", "category"}], longest first, ≤ 15
                                 (on CPU: top aten ops by self time)
    gemm_shapes                 [{"op", "shape": [m, k, n], "dtype", "count", "time_s", "misaligned": ["k", ...]}]
                                 hot matmuls from recorded shapes; misaligned = dims not multiple of 8 (16-bit)
                                 or 4 (fp32) — 64 recommended
    gemm_alignment              [{"shape": [m,k,n], "padded": [m,k,n], "dtype", "time_s", "padded_time_s",
                                  "speedup_per_flop"}]  measured on the device (alignment.py)
    trace_bytes                 size of the gzipped trace
    truncated                   True when the size cap was hit (see capture note)
"""

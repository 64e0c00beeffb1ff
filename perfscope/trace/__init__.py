"""Profiler traces: capture a short window, turn it into per-step facts.

    with TraceCapture(out_dir / "trace", device="cuda", first_step=step) as cap:   # capture.py -> trace/rank0.json.gz
        for _ in range(cap.total_steps):
            train_step(); cap.step()
    facts = trace_facts(cap.path, device_type="cuda", steps=cap.active_steps)   # facts.py -> TraceFacts
    facts.gemm_alignment = benchmark_alignment(facts.gemm_shapes, device="cuda", dtype="bf16")   # measure/alignment.py

The facts are typed (perfscope.results.trace_facts: the contract, with a docstring per field), stored as
``TrialMetrics.trace_facts`` and read by the rules (perfscope.rules), the report (perfscope.report.facts)
and the trace diff (perfscope.results.trace_diff: a function of two typed results, so it lives with them).
The modules, in the order a trace flows through them:

    capture.py      the bounded torch.profiler window
    export.py       the file kept: its own folder, training-step labels, distributedInfo (HTA, Perfetto)
    reader.py       the file streamed in parsed batches, every bad input one line with file and position
    events.py       the trace read once: host-side annotations only, device work linked to its launch
    table.py        its events as numpy columns, one table per kind (what the analyzers read)
    intervals.py    merge / clip / gaps / subtract on (start, end) spans, as lists and as numpy columns
    categories.py   kernel and op names -> categories; does a GEMM kernel run on tensor cores
    facts.py        trace_facts() composing one analyzer per fact family: window.py (the profiled steps, data
                    wait), sync.py, gpu.py (timeline, idle gaps, launch-bound), kernels.py, host_ops.py (CPU op
                    times, GEMM shapes)
    communication.py  collectives against compute on one rank (exposed time, overlap, bus bandwidth)

How each GPU fact is decided is in facts.py's docstring; docs/gpu-verification.md lists what has been
checked on a real GPU and what only on hand-built CUDA-shaped traces (tests/kineto.py).
"""

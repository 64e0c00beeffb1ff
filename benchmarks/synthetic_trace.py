"""A large Kineto trace, deterministic from a seed: what an LLM training step writes, at any size.

    write_trace(Path("/tmp/big.json"), target_bytes=2 << 30, seed=0)          # plain JSON, ~2 GB
    write_trace(Path("/tmp/r3.json.gz"), target_bytes=30 << 20, rank=3, world_size=64)   # gzip'ed (by suffix)

Why synthetic: the traces users send are 1-4 GB (kineto issues 595, 760) and nobody's training trace of that size
can be committed or downloaded here. The shape follows real torch.profiler output (HTA's public A100/V100 traces):
Kineto's own layout (a header with deviceProperties and distributedInfo before traceEvents, one event per few lines,
trailing traceName / displayTimeUnit), ProfilerStep#N spans, cpu_ops with record_shapes' "Input Dims"/"Input type"
and with_stack's "Call stack", python_function frames, cudaLaunchKernel runtime calls linked to their kernels by
correlation and by ac2g flow events, kernels spread over several CUDA streams, NCCL kernels with their message
sizes on a communication stream overlapping compute, memcpys and memsets. Its size is set by the number of
layers per step; a few steps, as a profiler schedule records.
"""

from __future__ import annotations

import gzip
import io
import random
from pathlib import Path

STEPS = 4
STREAMS = (7, 13, 17, 21)
NCCL_STREAM = 24
LAYER_OPS = (  # (op, its kernel, whether it is a matmul with GEMM input shapes)
    ("aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", True),
    ("aten::mm", "nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNT", True),
    ("aten::_flash_attention_forward", "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >", False),
    ("aten::native_layer_norm",
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>", False),
    ("aten::gelu", "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", False),
    ("aten::add", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >", False),
    ("aten::mul",
     "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor>>", False),
)
FRAMES = ("train.py(88): train_step", "torch/nn/modules/module.py(1750): _call_impl",
          "torch/nn/modules/module.py(1739): _wrapped_call_impl", "model.py(41): forward", "torch/nn/functional.py(2900): linear")


class _Writer:
    """Kineto's event layout, written with string formatting (json.dumps per event would make a 2 GB file take
    far longer to write than to read)."""

    def __init__(self, fh: io.TextIOBase, rng: random.Random) -> None:
        self.fh, self.rng, self.first = fh, rng, True
        self.correlation, self.external = 1_000_000, 1  # a job's later steps: Kineto's ids count from process start

    def emit(self, text: str) -> None:
        self.fh.write(text if self.first else ",\n" + text)
        self.first = False

    def x(self, cat: str, name: str, pid: object, tid: object, ts: float, dur: float, args: str) -> None:
        self.emit(f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
                  f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n{args}\n    }}\n  }}')

    def flow(self, ph: str, pid: object, tid: object, ts: float, ident: int) -> None:
        bp = ', "bp": "e"' if ph == "f" else ""
        self.emit(f'  {{\n    "ph": "{ph}", "id": {ident}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
                  f'    "cat": "ac2g", "name": "ac2g"{bp}\n  }}')


def _op(w: _Writer, name: str, t: float, dur: float, *, shaped: bool, m: int, k: int, n: int, stack: bool) -> int:
    w.external += 1
    dims = f'[[{m}, {k}], [{k}, {n}], [{n}]]' if shaped else f'[[{m}, {k}], [{m}, {k}], []]'
    types = '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]' if shaped else '["c10::BFloat16", "c10::BFloat16", "Scalar"]'
    call_stack = f',\n      "Call stack": "{";".join(reversed(FRAMES))}"' if stack else ""
    w.x("cpu_op", name, 1, 1, t, dur,
        f'      "External id": {w.external}, "Record function id": 0, "Ev Idx": {w.external},\n'
        f'      "Input Dims": {dims},\n      "Input Strides": [[{k}, 1], [{n}, 1], [1]],\n'
        f'      "Input type": {types},\n      "Concrete Inputs": ["", "", "1"],\n      "Sequence number": {w.external},'
        f' "Fwd thread id": 0{call_stack}')
    return w.external


def _launch(w: _Writer, t: float, gpu_t: float, kernel: str, stream: int, ext: int, dur: float, args: str = "") -> None:
    w.correlation += 1
    c = w.correlation
    w.x("cuda_runtime", "cudaLaunchKernel", 1, 1, t, 4.2,
        f'      "External id": {ext}, "cbid": 211, "correlation": {c}')
    w.flow("s", 1, 1, t, c)
    extra = f",\n{args}" if args else ""
    w.x("kernel", kernel, 0, stream, gpu_t, dur,
        f'      "External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": {stream}, "correlation": {c},\n'
        f'      "registers per thread": 168, "shared memory": 213248, "blocks per SM": 1.975309,\n'
        f'      "warps per SM": 7.901235, "grid": [132, 1, 1], "block": [384, 1, 1],\n'
        f'      "est. achieved occupancy %": 6{extra}')
    w.flow("f", 0, stream, gpu_t, c)


def _step(w: _Writer, step: int, t: float, layers: int, *, slow: float) -> float:
    """One training step from host time ``t``: returns its end."""
    rng = w.rng
    start, gpu_t = t, t + 50.0
    body: list[tuple[float, float]] = []
    t += 5.0
    for layer in range(layers):
        layer_start = t
        w.x("python_function", FRAMES[3], 1, 1, t, 1.0, f'      "Python id": {layer}, "Python parent id": 1')
        for i, (op, kernel, shaped) in enumerate(LAYER_OPS):
            op_dur = rng.uniform(8, 30) * slow
            ext = _op(w, op, t, op_dur, shaped=shaped, m=4096, k=4096 + 8 * (i % 2), n=1024 * (1 + i % 3), stack=True)
            k_dur = rng.uniform(20, 400) if shaped else rng.uniform(3, 40)
            gpu_t = max(gpu_t, t + 6.0) + rng.uniform(0.5, 3.0)
            _launch(w, t + 2.0, gpu_t, kernel, STREAMS[(layer + i) % len(STREAMS)], ext, k_dur)
            gpu_t += k_dur
            t += op_dur + rng.uniform(1, 4)
        if layer % 4 == 3:  # a gradient bucket's all-reduce on the NCCL stream, overlapping the next layers
            ext = _op(w, "c10d::allreduce_", t, 12.0, shaped=False, m=1, k=1, n=1, stack=False)
            nelems = 25 * (1 << 20) // 2
            _launch(w, t + 2.0, gpu_t, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                    NCCL_STREAM, ext, rng.uniform(300, 900),
                    f'      "In msg nelems": {nelems}, "Out msg nelems": {nelems}, "Group size": 8, "dtype": "BFloat16"')
            t += 15.0
        if layer % 16 == 0:
            w.correlation += 1
            w.x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, STREAMS[0], gpu_t, 12.0,
                f'      "device": 0, "context": 1, "stream": {STREAMS[0]}, "correlation": {w.correlation}, "bytes": 1048576,'
                f' "memory bandwidth (GB/s)": 87.3')
            w.x("cuda_runtime", "cudaMemcpyAsync", 1, 1, t, 6.0, f'      "cbid": 41, "correlation": {w.correlation}')
            w.x("gpu_memset", "Memset (Device)", 0, STREAMS[1], gpu_t + 12.0, 2.0,
                f'      "device": 0, "context": 1, "stream": {STREAMS[1]}, "correlation": {w.correlation + 1}, "bytes": 4096')
            w.correlation += 1
            gpu_t += 14.0
        body.append((layer_start, t))
    w.x("cuda_runtime", "cudaDeviceSynchronize", 1, 1, t, max(1.0, gpu_t - t), '      "cbid": 165, "correlation": 1')
    end = max(t, gpu_t) + 5.0
    w.x("user_annotation", f"ProfilerStep#{step}", 1, 1, start, end - start, '      "External id": 1')
    w.x("gpu_user_annotation", f"ProfilerStep#{step}", 0, STREAMS[0], start + 50.0, end - start - 50.0, '      "External id": 1')
    return end + 20.0


def _header(rank: int, world_size: int) -> str:
    props = ",\n".join(
        f'    {{\n      "id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84934656000,\n'
        f'      "computeMajor": 9, "computeMinor": 0, "numSms": 132\n    }}' for i in range(8))
    return (f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [\n{props}\n  ],\n'
            f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}, "pg_count": 2}},\n'
            f'  "record_shapes": 1,\n  "with_stack": 1,\n  "traceEvents": [\n')


def _layer_bytes(seed: int) -> int:
    buf = io.StringIO()
    _step(_Writer(buf, random.Random(seed)), 0, 0.0, 8, slow=1.0)
    return max(1, len(buf.getvalue()) // 8)


def write_trace(path: Path, *, target_bytes: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                slow: float = 1.0) -> int:
    """Write the trace (gzip'ed when ``path`` ends in .gz) of about ``target_bytes`` uncompressed JSON; returns the
    file's size. ``slow``: a factor on this rank's host op times (a straggler)."""
    layers = max(4, target_bytes // (STEPS * _layer_bytes(seed)))
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        rng = random.Random(seed * 1000 + rank)
        w = _Writer(fh, rng)
        fh.write(_header(rank, world_size))
        w.emit('  {"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0, "args": {"name": "python3"}}')
        t = 1_700_000_000_000.0 + rank * 3.0
        for step in range(STEPS):
            t = _step(w, 10 + step, t, layers, slow=slow)
        fh.write('\n  ],\n  "traceName": "synthetic.pt.trace.json",\n  "displayTimeUnit": "ms",\n'
                 '  "baseTimeNanoseconds": 1700000000000000000\n}\n')
    return path.stat().st_size

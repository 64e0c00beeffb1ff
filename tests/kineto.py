"""Kineto-shaped CUDA traces for tests, built from a simulated host thread and one GPU stream.

    python -m tests.kineto          # rewrites tests/data/traces/cuda/*.json.gz from the scenarios below

No GPU is needed to test the trace analysis, but its inputs must look like what torch.profiler writes on
one. The builder reproduces the structure of torch >= 2.4 Chrome traces on CUDA (checked against the
public GPU traces in HolisticTraceAnalysis's tests/data and the Kineto exporter's output):

- host events on pid=PID, tid=thread: `user_annotation` (ProfilerStep#N, record_function labels such as
  perfscope::data), `cpu_op` (aten ops; "Input Dims"/"Input type" with record_shapes), `cuda_runtime` /
  `cuda_driver` calls carrying the enclosing op's "External id" and their own "correlation";
- device events on pid=device, tid=stream: `kernel`, `gpu_memcpy` (e.g. "Memcpy HtoD (Pageable -> Device)"
  with "bytes"), `cuda_sync` ("Stream Sync": the GPU-side record of a host synchronization, not GPU work),
  and `gpu_user_annotation`: a GPU-timeline COPY of every user annotation, same name, spanning the device
  work launched inside it (this copy is what doubled perfscope's step count on CUDA);
- flow events (ph "s"/"f", cat "ac2g", id = correlation) from each runtime call to its device activity.

The host clock advances as the host would: an op costs dispatch time, a launch costs its runtime call, a
blocking call (pageable copy, stream synchronize) waits for the stream to drain. Kernels start when both
launched and the stream is free, so a GPU-bound loop queues work and a launch-bound one leaves gaps.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "data" / "traces" / "cuda"

H100 = {
    "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "numSms": 132, "sharedMemPerBlockOptin": 232448,
}
LAUNCH_LATENCY_US = 3.0  # launch call start -> earliest kernel start on an idle stream


class KinetoTrace:
    """Appends events as a training step would produce them; ``to_json()`` gives the Chrome trace dict.

    ``gpu_annotations=False`` and ``step_cat="cpu_op"`` give the shape older torch versions wrote.
    """

    def __init__(self, *, pid: int = 31337, stream: int = 7, t0: float = 1_731_500_000_000.0,
                 gpu_annotations: bool = True, step_cat: str = "user_annotation") -> None:
        self.pid, self.stream = pid, stream
        self.tid = pid
        self.now = t0
        self.gpu_free = t0
        self.gpu_annotations, self.step_cat = gpu_annotations, step_cat
        self.events: list[dict[str, Any]] = []
        self._ext = 0
        self._corr = 100_000
        self._ops: list[int] = []  # External ids of the open ops, innermost last
        self._device_work: list[tuple[float, float, float]] = []  # (launch ts, start, end) of device activity
        self._runtime_index: dict[int, int] = {}  # correlation -> index of its runtime call in events

    # ------------------------------------------------------------------------------------------ host side

    def work(self, us: float) -> None:
        """Host time outside any op (Python, the data iterator)."""
        self.now += us

    @contextmanager
    def annotation(self, name: str, *, cat: str = "user_annotation") -> Iterator[None]:
        """A record_function span on the host, plus its gpu_user_annotation copy when the trace has those."""
        start, ext = self.now, self._next_ext()
        first = len(self._device_work)
        yield
        self._x(name, cat, start, self.now - start, self.pid, self.tid, {"External id": ext, "Record function id": 0})
        work = self._device_work[first:]
        if self.gpu_annotations and cat == "user_annotation" and work:
            begin, end = min(w[1] for w in work), max(w[2] for w in work)
            self._x(name, "gpu_user_annotation", begin, end - begin, 0, self.stream, {"External id": ext})

    @contextmanager
    def step(self, n: int) -> Iterator[None]:
        with self.annotation(f"ProfilerStep#{n}", cat=self.step_cat):
            yield

    @contextmanager
    def op(self, name: str, *, dims: list[list[int]] | None = None, types: list[str] | None = None,
           dispatch_us: float = 4.0) -> Iterator[int]:
        """An aten op on the current thread: dispatch overhead, then whatever runs inside it."""
        start, ext = self.now, self._next_ext()
        self._ops.append(ext)
        self.now += dispatch_us
        try:
            yield ext
        finally:
            self._ops.pop()
            self.now += 1.0
            args: dict[str, Any] = {"External id": ext, "Record function id": 0}
            if dims is not None:
                args["Input Dims"] = dims
                args["Input type"] = types or ["float"] * len(dims)
            self._x(name, "cpu_op", start, self.now - start, self.pid, self.tid, args)

    @contextmanager
    def thread(self, tid: int) -> Iterator[None]:
        """Run on another host thread (the autograd engine's backward thread); the main thread waits."""
        previous, self.tid = self.tid, tid
        try:
            yield
        finally:
            self.tid = previous

    # ---------------------------------------------------------------------------------------- device side

    def launch(self, kernel: str, dur: float, *, call_us: float = 6.0, api: str = "cudaLaunchKernel") -> None:
        """A kernel launch: the runtime call on the host, the kernel on the stream once it is free."""
        driver = api == "cuLaunchKernel"  # Triton launches through the driver API
        corr, ts = self._runtime(api, call_us, cat="cuda_driver" if driver else "cuda_runtime", cbid=307 if driver else 211)
        self._device("kernel", kernel, corr, ts, dur, {"grid": [132, 1, 1], "block": [256, 1, 1], "registers per thread": 64})
        self.now = ts + call_us

    def memcpy(self, kind: str, nbytes: int, dur: float, *, blocking: bool) -> None:
        """cudaMemcpyAsync; from or to pageable memory it blocks the host until the copy is done."""
        corr, ts = self._runtime("cudaMemcpyAsync", 0.0, cbid=41)
        start, end = self._device("gpu_memcpy", kind, corr, ts, dur, {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / dur / 1e3})
        call_end = (end + 2.0) if blocking else ts + 5.0
        self.events[self._runtime_index[corr]]["dur"] = round(call_end - ts, 3)
        self.now = call_end

    def synchronize(self, api: str = "cudaStreamSynchronize") -> None:
        """Host blocks until the stream drains; the GPU timeline records it as a cuda_sync event."""
        corr, ts = self._runtime(api, 0.0, cbid=131 if api == "cudaStreamSynchronize" else 165)
        end = max(ts, self.gpu_free) + 3.0
        self.events[self._runtime_index[corr]]["dur"] = round(end - ts, 3)
        kind = "Stream Sync" if api == "cudaStreamSynchronize" else "Context Sync"
        self._x(kind, "cuda_sync", ts, end - ts, 0, self.stream,
                {"External id": self._ops[-1] if self._ops else 0, "cuda_sync_kind": kind, "stream": self.stream, "correlation": corr,
                 "device": 0, "context": 1})
        self.now = end

    # ------------------------------------------------------------------------------------------- output

    def to_json(self) -> dict[str, Any]:
        meta = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "args": {"name": "python"}},
            {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
            {"name": "thread_name", "ph": "M", "ts": 0, "pid": 0, "tid": self.stream, "args": {"name": f"stream {self.stream}"}},
        ]
        return {
            "schemaVersion": 1, "deviceProperties": [H100], "cupti_version": 24, "cuda_runtime_version": 12080,
            "cuda_driver_version": 12080, "record_shapes": 1, "displayTimeUnit": "ms",
            "traceEvents": meta + sorted(self.events, key=lambda e: (e["ts"], e["pid"] != self.pid)),
        }

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(path, "wb", mtime=0) as fh:  # mtime=0: byte-identical when rebuilt
            fh.write(json.dumps(self.to_json(), separators=(",", ":")).encode())
        return path

    # -------------------------------------------------------------------------------------------- parts

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _runtime(self, api: str, call_us: float, *, cat: str = "cuda_runtime", cbid: int) -> tuple[int, float]:
        self._corr += 1
        corr, ts = self._corr, self.now
        ext = self._ops[-1] if self._ops else 0
        self._x(api, cat, ts, call_us, self.pid, self.tid, {"External id": ext, "cbid": cbid, "correlation": corr})
        self._runtime_index[corr] = len(self.events) - 1
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": round(ts, 3), "cat": "ac2g", "name": "ac2g"})
        return corr, ts

    def _device(self, cat: str, name: str, corr: int, launch_ts: float, dur: float, extra: dict[str, Any]) -> tuple[float, float]:
        start = max(launch_ts + LAUNCH_LATENCY_US, self.gpu_free)
        self.gpu_free = start + dur
        args = {"External id": self._ops[-1] if self._ops else 0, "device": 0, "context": 1, "stream": self.stream,
                "correlation": corr, **extra}
        self._x(name, cat, start, dur, 0, self.stream, args)
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": self.stream, "ts": round(start, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self._device_work.append((launch_ts, start, start + dur))
        return start, start + dur

    def _x(self, name: str, cat: str, ts: float, dur: float, pid: int, tid: int, args: dict[str, Any]) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3), "dur": round(dur, 3), "args": args})


# ----------------------------------------------------------------------------------------- kernel names
# As cuBLAS 12.8+ (H100), ATen and Inductor name them.

NVJET_BF16 = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
NVJET_BF16_NN = "nvjet_tst_256x128_64x4_1x2_h_bz_coopB_NNT"
ADD_BF16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
GELU_BF16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
             "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
             "{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl("
             "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() "
             "const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)")
MUL_FLOAT = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
             "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, at::native::AUnaryFunctor"
             "<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2>)")
SUM_FLOAT = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
             "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
             "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::"
             "sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)")
FUSED_ADAMW = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
               "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
               "(at::native::ADAM_MODE)1, false>, float*, double, float*, float*, float*, float, float, float, float, "
               "float, bool, bool>(at::native::(anonymous namespace)::TensorListMetadata<4>)")
SGEMM = "ampere_sgemm_32x32_sliced1x4_tn"

BF16 = "c10::BFloat16"
HIDDEN, TOKENS, VOCAB = 1024, 4096, 50257  # the vocabulary is GPT-2's: not a multiple of 8


def _linear(t: KinetoTrace, m: int, k: int, n: int, kernel_us: float) -> None:
    with t.op("aten::linear"), t.op("aten::addmm", dims=[[n], [m, k], [k, n]], types=[BF16] * 3, dispatch_us=8):
        t.launch(NVJET_BF16, kernel_us)


def _mm(t: KinetoTrace, m: int, k: int, n: int, kernel_us: float) -> None:
    with t.op("aten::mm", dims=[[m, k], [k, n]], types=[BF16] * 2, dispatch_us=8):
        t.launch(NVJET_BF16_NN, kernel_us)


def _loss_item(t: KinetoTrace) -> None:
    """`loss.item()`: a 4-byte copy to pageable memory, which waits for the stream, then a stream synchronize."""
    with t.op("aten::item"), t.op("aten::_local_scalar_dense"):
        t.memcpy("Memcpy DtoH (Device -> Pageable)", 4, 2, blocking=True)
        t.synchronize()


def _tiny(t: KinetoTrace, name: str, kernel: str, count: int, kernel_us: float, host_us: float) -> None:
    for _ in range(count):
        with t.op(name, dispatch_us=host_us):
            t.launch(kernel, kernel_us)


def bf16_gpu_bound_with_item(steps: int = 3) -> KinetoTrace:
    """A bf16 MLP with GPT-2's vocabulary head: GPU-bound, a 2.5 ms data wait, a pageable input copy, and a
    `loss.item()` at the end of each step that blocks the host until the GPU drains.

    Many tiny elementwise kernels (≥ 200 a step, 4 µs each) make it LOOK launch-bound by kernel count and
    median; the host is blocked most of the step, so it is not.
    """
    t = KinetoTrace()
    for n in range(2, 2 + steps):
        with t.step(n):
            with t.annotation("perfscope::data"):
                t.work(2_500)
            with t.op("aten::to"), t.op("aten::_to_copy"), t.op("aten::copy_"):
                t.memcpy("Memcpy HtoD (Pageable -> Device)", 8 * 2**20, 350, blocking=True)
            for _ in range(4):  # forward
                _linear(t, TOKENS, HIDDEN, HIDDEN, 900)
                with t.op("aten::gelu"):
                    t.launch(GELU_BF16, 40)
                _tiny(t, "aten::add", ADD_BF16, 30, 4, 12)
            _linear(t, TOKENS, HIDDEN, VOCAB, 3_000)  # the vocabulary head: misaligned n
            with t.op("aten::sum"):
                t.launch(SUM_FLOAT, 30)
            with t.thread(t.pid + 1):  # backward, on the autograd engine's thread
                _mm(t, TOKENS, VOCAB, HIDDEN, 3_000)  # grad input of the head: misaligned k
                _mm(t, VOCAB, TOKENS, HIDDEN, 3_000)  # grad weight of the head: misaligned m
                for _ in range(4):
                    _mm(t, TOKENS, HIDDEN, HIDDEN, 900)
                    _mm(t, HIDDEN, TOKENS, HIDDEN, 900)
                    _tiny(t, "aten::mul", MUL_FLOAT, 30, 4, 12)
            with t.op("aten::_fused_adamw_"):
                t.launch(FUSED_ADAMW, 300)
            _loss_item(t)
            t.work(40)
    return t


def fp32_launch_bound(steps: int = 2) -> KinetoTrace:
    """A deep, narrow fp32 MLP at a small batch: 300 kernels of 3 µs a step, each costing the host ~15 µs to
    dispatch and launch, so the GPU idles most of the step waiting for launches."""
    t = KinetoTrace()
    for n in range(2, 2 + steps):
        with t.step(n):
            with t.annotation("perfscope::data"):
                t.work(60)
            for _ in range(50):
                with t.op("aten::linear"), t.op("aten::addmm", dims=[[64], [4, 64], [64, 64]], types=["float"] * 3, dispatch_us=6):
                    t.launch(SGEMM, 4, call_us=5)
                _tiny(t, "aten::relu", MUL_FLOAT, 1, 2, 9)
            with t.thread(t.pid + 1):
                for _ in range(50):
                    _tiny(t, "aten::mm", SGEMM, 2, 4, 9)
                    _tiny(t, "aten::threshold_backward", MUL_FLOAT, 1, 2, 9)
            with t.op("aten::_fused_adamw_"):
                t.launch(FUSED_ADAMW, 20)
            _loss_item(t)
    return t


def compiled_bf16(steps: int = 3) -> KinetoTrace:
    """torch.compile (Inductor, max-autotune): Triton templates for the matmuls, fused pointwise/reduction
    kernels, launched through the driver API (cuLaunchKernel) from ops named after the kernels."""
    t = KinetoTrace()
    for n in range(2, 2 + steps):
        with t.step(n):
            with t.annotation("perfscope::data"):
                t.work(100)
            with t.op("Torch-Compiled Region: 0/0", dispatch_us=30):
                for i in range(4):
                    with t.op(f"triton_tem_fused_mm_{i}", dispatch_us=10):
                        t.launch(f"triton_tem_fused_mm_{i}", 800, api="cuLaunchKernel")
                    with t.op(f"triton_poi_fused_gelu_{i}", dispatch_us=10):
                        t.launch(f"triton_poi_fused_gelu_{i}", 60, api="cuLaunchKernel")
                with t.op("triton_red_fused_sum_4", dispatch_us=10):
                    t.launch("triton_red_fused_sum_4", 40, api="cuLaunchKernel")
            with t.op("aten::_fused_adamw_"):
                t.launch(FUSED_ADAMW, 200)
            _loss_item(t)
    return t


SCENARIOS = {
    "h100_bf16_gpu_bound_item": bf16_gpu_bound_with_item,
    "h100_fp32_launch_bound": fp32_launch_bound,
    "h100_compiled_bf16": compiled_bf16,
}


def main() -> None:
    for name, build in SCENARIOS.items():
        path = build().write(FIXTURES / f"{name}.json.gz")
        print(f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}: {path.stat().st_size / 1e3:.1f} kB")


if __name__ == "__main__":
    main()

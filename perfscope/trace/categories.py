"""Kernel and aten-op names → what kind of work they are, and whether a GEMM ran on tensor cores.

Design notes: docs/trace.md."""

from __future__ import annotations

import functools
import re

# First match wins. Communication first, by what the kernel is rather than one library's name: NCCL and RCCL,
# NVSHMEM, DeepEP's MoE dispatch/combine, gloo, MSCCL/TCCL, custom all-to-all/all-gather kernels, send/recv
# (perfscope.trace.kernels also takes any kernel a record_param_comms / c10d:: op launched). Embedding lookups come
# before gemm: FBGEMM's `fbgemm_gpu::split_embedding_codegen_forward_...` contains "gemm" as a substring and is a
# gather, not a matmul. Attention and conv come before gemm (flash kernels and implicit-GEMM convolutions
# contain "gemm"/"cutlass"); normalization before conv (cuDNN batch-norm kernels contain "cudnn");
# optimizer before elementwise (multi_tensor_apply kernels are elementwise in form). Names seen in real public
# GPU traces (HTA's tests/data) and not matched otherwise: cuDNN's weight-gradient engines (`wgrad_alg0_engine`),
# ATen's layer-norm kernels (`GammaBetaBackwardCUDAKernel`, `RowwiseMomentsCUDAKernel`), pooling, and Inductor's
# fused kernels as older versions named them (`triton__0d1d2d`).
CATEGORIES: list[tuple[str, re.Pattern[str]]] = [
    ("communication", re.compile(
        r"nccl|rccl|nvshmem|deep_?ep|gloo|msccl|tccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
        r"c10d|record_param_comms|(?:^|[_:\s])(?:send|recv|send_?recv|isend|irecv)(?:$|[_<(\s])", re.I)),
    ("embedding", re.compile(r"embedding|embed_|fbgemm_gpu::.*(?:lookup|pooled|bounds_check|jagged)|\bindex_select", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax_.*attn|mem_eff", re.I)),
    ("normalization", re.compile(
        r"(?:layer|group|batch|instance|rms|weight)_?norm|welford|\bbn_|cudnn::bn|GammaBetaBackward|RowwiseMoments", re.I)),
    ("conv", re.compile(r"conv(?!ert)|implicit_gemm|winograd|cudnn|im2col|fft2d|wgrad_alg|dgrad_alg", re.I)),
    ("gemm", re.compile(
        r"gemm|gemv|matmul|\bmm\b|aten::(?:mm|addmm|bmm|baddbmm|linear)\b|cutlass|xmma|cublas|nvjet|"
        r"s16816|h16816|hmma|wgmma|triton_tem_", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|adam|sgd|lamb(?!da)|adagrad|rmsprop|_foreach_|optimizer", re.I)),
    ("memset", re.compile(r"memset|aten::zero_|aten::fill_", re.I)),
    ("memcpy", re.compile(r"memcpy|aten::copy_|aten::to\b|aten::_to_copy", re.I)),
    ("elementwise", re.compile(
        r"elementwise|vectorized|unrolled|reduce|softmax|gelu|relu|silu|dropout|add|mul|div|sub|exp|tanh|sigmoid|cat|where|"
        r"index|embedding|pool|triton_(?:poi|red|per)_|^triton__\d", re.I)),
]

# A GEMM kernel's name says it uses tensor cores when it names a reduced-precision dtype, an MMA
# instruction, or a tensor-op tile. Dtype tokens only count at the start of a name component
# (after "_", or at the start): a bare "h" or "bf" anywhere in the name says nothing.
_TENSOR_CORE = re.compile(
    r"(?:^|[_:<\s])(?:tf32|bf16|f16|fp16|fp8|e4m3|e5m2)|hmma|wgmma|gmma|imma|tensorop|[hs]16816|[hs]1688|16816", re.I
)
# fp32 on CUDA cores: SIMT sgemm, xmma with f32 inputs and outputs (no tf32), nvjet with single-only type codes.
_FP32 = re.compile(r"sgemm|f32f32_f32f32|simt|ffma", re.I)
# cuBLAS "nvjet" kernels: nvjet[_smXX]_<A/B type><compute type><C/D type>_...: h = fp16, t = bf16, s = fp32.
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]{3})(?:_|$)", re.I)


@functools.lru_cache(maxsize=8192)  # a trace repeats a few hundred names thousands of times; names run to 1 kB
def categorize(name: str) -> str:
    """The category of a kernel (CUDA) or aten op (CPU); "other" when no pattern matches."""
    for category, pattern in CATEGORIES:
        if pattern.search(name):
            return category
    return "other"


@functools.lru_cache(maxsize=8192)
def gemm_on_tensor_cores(name: str) -> bool | None:
    """True / False when a GEMM kernel's name says whether it runs on tensor cores; None when it does not say."""
    if _TENSOR_CORE.search(name):
        return True
    nvjet = _NVJET.search(name)
    if nvjet:
        return set(nvjet.group(1).lower()) != {"s"}
    if _FP32.search(name):
        return False
    return None

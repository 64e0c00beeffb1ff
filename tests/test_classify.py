"""Trial failures classified as OOM (bisect the micro-batch) or error (stop): every allocator failure is an OOM."""

import pytest
import torch

from perfscope.trial.child import classify_exception


@pytest.mark.parametrize(
    "exc",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError("CUDA driver error: cudaErrorMemoryAllocation"),
        RuntimeError("cuFFT error: CUFFT_ALLOC_FAILED"),
        RuntimeError("cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`"),
    ],
    ids=lambda e: str(e)[:40],
)
def test_allocator_failures_are_oom(exc):
    assert classify_exception(exc) == "oom"


def test_a_wrapped_oom_is_still_an_oom():
    try:
        try:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
        except RuntimeError as inner:
            raise ValueError("forward failed") from inner
    except ValueError as outer:
        assert classify_exception(outer) == "oom"


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"),
        RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`"),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
    ],
    ids=lambda e: str(e)[:40],
)
def test_other_failures_are_errors(exc):
    assert classify_exception(exc) == "error"

"""Kernel-name categories and tensor-core detection, on names taken from real H100/A100 traces."""

from __future__ import annotations

import pytest

from perfscope.trace.categories import categorize, gemm_on_tensor_cores

# ATen elementwise/reduce kernels: almost every one carries "{lambda(...)#N}" in its name.
SUM_REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
    "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor"
    "<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)"
)
COPY = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
    "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
    "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}"
    "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
FUSED_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, "
    "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, "
    "float*, float*, float*, float, float, float, float, float, bool, bool>(at::native::(anonymous namespace)::TensorListMetadata<4>)"
)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        (SUM_REDUCE, "elementwise"),  # "{lambda" is not the LAMB optimizer
        # in the real V100/A100 traces of HTA's tests/data, and "other" before:
        ("void wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*)", "conv"),
        ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*)",
         "normalization"),
        ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*)",
         "normalization"),
        ("void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>(float const*, long const*)", "elementwise"),
        ("triton__0d1d2d3d4d5d6d7d8d9d10d11d12d13d14", "elementwise"),
        (GELU, "elementwise"),
        (COPY, "elementwise"),
        (FUSED_ADAM, "optimizer"),
        ("void multi_tensor_apply_kernel<TensorListMetadata<5>, LambStage1Functor<float>>", "optimizer"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),  # H100 cuBLAS (CUDA >= 12.8), bf16
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),  # fp16
        ("nvjet_sss_tf32_128x256_TNT", "gemm"),
        ("triton_tem_fused_mm_0", "gemm"),  # Inductor's Triton GEMM template
        ("triton_tem_fused_addmm_relu_t_1", "gemm"),
        ("triton_poi_fused_add_cos_sin_0", "elementwise"),
        ("triton_red_fused__to_copy_sum_2", "elementwise"),
        ("triton_poi_fused__to_copy_convert_element_type_3", "elementwise"),  # "convert" is not a convolution
        ("triton_red_fused_native_layer_norm_0", "normalization"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*)", "normalization"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1", "conv"),
        ("ampere_sgemm_128x64_nn", "gemm"),
        ("flash_fwd_kernel", "attention"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "normalization"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
        ("aten::addmm", "gemm"),
    ],
)
def test_kernel_categories(name: str, category: str) -> None:
    assert categorize(name) == category


@pytest.mark.parametrize(
    ("name", "tensor_cores"),
    [
        # an fp32 cuBLAS kernel whose name holds an "h" ("batched"): fp32, whatever letters it contains
        ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_batched_kernel__5x_cublas", False),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", True),
        ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel__5x_cublas", True),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", True),
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", True),
        ("nvjet_sss_tf32_128x256_TNT", True),
        ("nvjet_sss_128x64_64x8_1x2_v_bz_NNT", False),
        ("ampere_sgemm_128x64_nn", False),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(cutlass_80_simt_sgemm_128x128_8x4_nn_align1::Params)", False),
        ("cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>", True),
        ("triton_tem_fused_mm_0", None),  # the name does not say: not counted either way
    ],
)
def test_tensor_core_detection(name: str, tensor_cores: bool | None) -> None:
    assert gemm_on_tensor_cores(name) is tensor_cores

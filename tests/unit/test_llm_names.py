"""cascade.llm.names: real kernel names of LLM serving stacks read into the LLM vocabulary."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from cascade.llm.names import FIELDS, LlmKernel, classify, classify_many

#: (kernel name as traces show it, the fields it must read as; unlisted fields are defaults).
CASES: list[tuple[str, dict[str, Any]]] = [
    # ---- NCCL and other collectives
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     dict(kind="collective", dtype="bf16", impl="nccl", collective="all_reduce", algo="ring",
          protocol="ll")),
    ("ncclDevKernel_AllGather_RING_LL",
     dict(kind="collective", impl="nccl", collective="all_gather", algo="ring", protocol="ll")),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL128",
     dict(kind="collective", dtype="fp32", impl="nccl", collective="reduce_scatter", algo="ring",
          protocol="ll128")),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)",
     dict(kind="collective", dtype="fp16", impl="nccl", collective="all_reduce", algo="ring",
          protocol="ll")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
     dict(kind="collective", impl="nccl", collective="send_recv")),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_SIMPLE",
     dict(kind="collective", dtype="bf16", impl="nccl", collective="all_reduce", algo="nvls",
          protocol="simple")),
    ("ncclDevKernel_AllReduce_Sum_f16_TREE_LL",
     dict(kind="collective", dtype="fp16", impl="nccl", collective="all_reduce", algo="tree",
          protocol="ll")),
    ("ncclDevKernel_Broadcast_RING_LL",
     dict(kind="collective", impl="nccl", collective="broadcast", algo="ring", protocol="ll")),
    ("ncclKernel_AllReduce_RING_LL_Sum___nv_bfloat16",
     dict(kind="collective", dtype="bf16", impl="nccl", collective="all_reduce", algo="ring",
          protocol="ll")),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE",
     dict(kind="collective", dtype="bf16", impl="nccl", collective="all_reduce", algo="nvls_tree",
          protocol="simple")),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
     dict(kind="collective", impl="nccl")),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
     "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
     dict(kind="collective", dtype="bf16", impl="vllm_custom", collective="all_reduce")),
    ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals, "
     "vllm::Signal*, float*, int, int)",
     dict(kind="collective", dtype="fp32", impl="vllm_custom", collective="all_reduce")),
    ("multimem_all_reduce_kernel",
     dict(kind="collective", impl="multimem", collective="all_reduce")),
    ("multimem_all_reduce",
     dict(kind="collective", impl="multimem", collective="all_reduce")),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_"
     "bfloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)",
     dict(kind="collective", dtype="bf16", impl="multimem", collective="all_reduce")),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_"
     "bfloat16**, unsigned long, unsigned long, __nv_bfloat16*, unsigned long, unsigned int**, "
     "unsigned long, unsigned long)",
     dict(kind="collective", dtype="bf16", impl="symm_mem", collective="all_reduce")),
    ("two_shot_all_reduce_kernel",
     dict(kind="collective", impl="symm_mem", collective="all_reduce")),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_"
     "bfloat16, 8, true>(tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams<__nv_bfloat16>)",
     dict(kind="collective", dtype="bf16", impl="trtllm_ar", collective="all_reduce")),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, "
     "false>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
     dict(kind="collective", dtype="bf16", impl="trtllm_ar", collective="all_reduce")),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
     dict(kind="collective", impl="deepep", collective="all_to_all")),
    ("void deep_ep::internode_ll::combine<true, 7168, 8, 0>(void*, int*)",
     dict(kind="collective", impl="deepep", collective="all_to_all")),
    ("nccl:all_reduce",
     dict(kind="collective", impl="nccl", collective="all_reduce")),
    ("ncclDevKernel_AllGather_COLLNET_DIRECT_SIMPLE",
     dict(kind="collective", impl="nccl", collective="all_gather", algo="collnet",
          protocol="simple")),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_PAT_SIMPLE",
     dict(kind="collective", dtype="bf16", impl="nccl", collective="reduce_scatter", algo="pat",
          protocol="simple")),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, true>(tensorrt_"
     "llm::kernels::AllReduceParams)",
     dict(kind="collective", dtype="bf16", impl="trtllm_ar", collective="all_reduce")),
    # ---- GEMMs
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
     dict(kind="gemm", dtype="bf16", impl="nvjet")),
    ("nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT",
     dict(kind="gemm", dtype="bf16", impl="nvjet", arch_sm=90)),
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
     dict(kind="gemm", dtype="fp16", impl="nvjet")),
    ("nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT",
     dict(kind="gemm", dtype="fp8", impl="nvjet")),
    ("nvjet_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT",
     dict(kind="gemm", dtype="fp8_block", impl="nvjet")),
    ("nvjet_sm100_tst_64x32_64x16_2x1_2cta_h_bz_TNT",
     dict(kind="gemm", dtype="bf16", impl="nvjet", arch_sm=100)),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_"
     "segment_k_off_kernel__5x_cublas",
     dict(kind="gemm", dtype="bf16", impl="cublas", arch_sm=90)),
    ("sm90_fp8_gemm_1d2d_impl",
     dict(kind="gemm", dtype="fp8_block", impl="deepgemm", arch_sm=90)),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 1u, 128u, 160u, 128u, 1u, 4u, "
     "2u, 1u, true, false, (deep_gemm::GemmType)0>(float*, int*, unsigned int, unsigned int, "
     "CUtensorMap, CUtensorMap)",
     dict(kind="gemm", dtype="fp8_block", impl="deepgemm", arch_sm=90)),
    ("void deep_gemm::sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0, 0u, 0u>(int*)",
     dict(kind="gemm", dtype="fp8_block", impl="deepgemm", arch_sm=100)),
    ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_1x2x1_0_tnn_align16_"
     "warpspecialized_cooperative_fp8_fastaccum_epi_tma",
     dict(kind="gemm", dtype="fp8", impl="cutlass", arch_sm=90)),
    ("cutlass3x_sm100_tensorop_gemm_bf16_bf16_f32_bf16_bf16_256x128x64_2x1x1_0_tnn_align8_2sm",
     dict(kind="gemm", dtype="bf16", impl="cutlass", arch_sm=100)),
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90_fp8<cutlass::float_e4m3_t, "
     "cutlass::bfloat16_t, vllm::c3x::ScaledEpilogue> >(vllm::cutlass_3x_gemm_sm90_fp8::Params)",
     dict(kind="gemm", dtype="fp8", impl="cutlass", arch_sm=90)),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
     "int, int>, cutlass::gemm::collective::CollectiveMma<"
     "cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedBlockwiseScaling<4, 2>, cutlass::float_"
     "e4m3_t>>>",
     dict(kind="gemm", dtype="fp8_block", impl="cutlass", arch_sm=90)),
    ("cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_bf16_bf16_128x128x256_1x1x1_0_"
     "tnn_align32_o_vs16_2sm_bias_bf16_relu",
     dict(kind="gemm", dtype="fp4", impl="cutlass", arch_sm=100)),
    ("kernel_cutlass_kernel_flashinfercute_dslblockscaled_"
     "gemmSm100BlockScaledPersistentDenseGemmKernel_nvfp4_object_at_0x7f",
     dict(kind="gemm", dtype="fp4", impl="flashinfer", arch_sm=100)),
    ("void marlin::Marlin<256, 1, 8, 8, 4, 8>(int4 const*, int4 const*, int4*, int4 const*, int, "
     "int, int, int*)",
     dict(kind="gemm", impl="marlin")),
    ("void marlin::Marlin<__nv_bfloat16, vllm::kU4B8.id(), 256, 1, 8, 8, true, 4, 8, "
     "false>(int4 const*)",
     dict(kind="gemm", dtype="int4", impl="marlin")),
    ("gptq_marlin_gemm",
     dict(kind="gemm", impl="marlin")),
    ("fp8_marlin_gemm",
     dict(kind="gemm", dtype="fp8", impl="marlin")),
    ("void cutlass::device_kernel<machete::MacheteKernelTemplate<cutlass::bfloat16_t, "
     "cutlass::uint4b_t> >(machete::Params)",
     dict(kind="gemm", dtype="int4", impl="machete")),
    ("machete_mm",
     dict(kind="gemm", impl="machete")),
    ("_w8a8_block_fp8_matmul",
     dict(kind="gemm", dtype="fp8_block", impl="triton")),
    ("triton_tem_fused_mm_0",
     dict(kind="gemm", impl="triton")),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_"
     "tensor16x8x16_kernel",
     dict(kind="gemm", dtype="fp16", impl="cublas", arch_sm=80)),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
     dict(kind="gemm", dtype="bf16", impl="cublas", arch_sm=80)),
    ("sm89_xmma_gemm_e4m3bf16_bf16f32_f32_tn_n_tilesize128x128x64_stage4_warpsize2x2x1_"
     "tensor16x8x32_kernel",
     dict(kind="gemm", dtype="fp8", impl="cublas", arch_sm=89)),
    ("ampere_sgemm_128x64_tn",
     dict(kind="gemm", dtype="fp32", impl="cublas", arch_sm=80)),
    ("volta_h884gemm_64x64_ldg8_nn",
     dict(kind="gemm", dtype="fp16", impl="cublas", arch_sm=70)),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, "
     "false, false>(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_"
     "bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, "
     "void*, long, float*, int*)",
     dict(kind="gemm", dtype="bf16", impl="cublas")),
    ("bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s4_et128x8_m128x8x64_cga1x1x1_16dp256b_rM_TN_transOut_"
     "schedS_bN_sm100f",
     dict(kind="gemm", dtype="fp4", impl="trtllm_gen", arch_sm=100)),
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_schedS_sm100a",
     dict(kind="gemm", dtype="fp8", impl="trtllm_gen", arch_sm=100)),
    ("bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_dsFp8_"
     "schedS_sm100a",
     dict(kind="gemm", dtype="fp8_block", impl="trtllm_gen", arch_sm=100)),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_"
     "align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params)",
     dict(kind="gemm", dtype="bf16", impl="cutlass", arch_sm=80)),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, "
     "4, false, false, false, true, false, false, cublasGemvParamsEx<int, "
     "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_"
     "bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, "
     "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
     "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_"
     "bfloat16>, float>, float, float)",
     dict(kind="gemm", dtype="bf16", impl="cublas")),
    ("gemm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s4_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_"
     "transOut_schedS_sm100f",
     dict(kind="gemm", dtype="fp4", impl="trtllm_gen", arch_sm=100)),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<"
     "cutlass::epilogue::thread::NumericConverter<cutlass::bfloat16_t, float>>>",
     dict(kind="gemm", dtype="bf16", impl="cutlass")),
    ("void cutlass::device_kernel<vllm::(anonymous namespace)::cutlass_3x_gemm_fp8_blockwise<"
     "cutlass::float_e4m3_t, cutlass::bfloat16_t>>",
     dict(kind="gemm", dtype="fp8_block", impl="cutlass")),
    ("void cutlass::device_kernel<vllm::cutlass_3x_gemm<signed char, cutlass::bfloat16_t, "
     "vllm::c3x::ScaledEpilogue>>",
     dict(kind="gemm", dtype="int8", impl="cutlass")),
    ("nvjet_sm100_ooo_128x256_128x4_2x1_2cta_v_bz_Avec16UE4M3_Bvec16UE4M3_TNT",
     dict(kind="gemm", dtype="fp4", impl="nvjet", arch_sm=100)),
    # ---- attention
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
     "true, false, false, false, true, false, false>(flash::Flash_fwd_params)",
     dict(kind="attention", dtype="bf16", impl="fa2", kv_dtype="bf16")),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
     "false, cutlass::half_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, false, "
     "true, false, false, true, true, false, false>(flash::Flash_fwd_params)",
     dict(kind="attention", dtype="fp16", impl="fa2", kv_dtype="fp16")),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, "
     "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_"
     "t> >, 4, 1, false>(flash::Flash_fwd_params)",
     dict(kind="attention", dtype="bf16", impl="fa2", kv_dtype="bf16")),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
     "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
     "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, "
     "cutlass::arch::Sm90, true, false, false, true, true, true, false, true, true, true, false, "
     "false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<"
     "128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, "
     "cutlass::arch::Sm90, 256, true, true, false, false>, "
     "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, "
     "true> > > >(flash::FlashAttnFwdSm90::Params)",
     dict(kind="attention", dtype="bf16", impl="fa3", kv_dtype="bf16", arch_sm=90)),
    ("void flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128>>, 7, 256, 1, false, "
     "true, cutlass::bfloat16_t, float, cutlass::arch::Sm90>(flash::FlashAttnFwdCombine::Params)",
     dict(kind="attention", dtype="bf16", impl="fa3", kv_dtype="bf16", arch_sm=90)),
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__"
     "tensor0000o1101281",
     dict(kind="attention", impl="fa4", arch_sm=100)),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<"
     "(flashinfer::MaskMode)1, 128u, 2u, 4u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __"
     "nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, "
     "false, false, false> >, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, _"
     "_nv_bfloat16, int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __"
     "nv_bfloat16, int>)",
     dict(kind="attention", dtype="bf16", impl="flashinfer", phase="prefill", kv_dtype="bf16")),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 8u, "
     "8u, 1u, 4u, flashinfer::DefaultAttention<false, false, false, false>, "
     "flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_fp8_e4m3, __nv_bfloat16, "
     "int> >(flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_fp8_e4m3, __nv_bfloat16, int>)",
     dict(kind="attention", dtype="bf16", impl="flashinfer", phase="decode", kv_dtype="fp8")),
    ("void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<>>",
     dict(kind="attention", impl="flashinfer", phase="prefill")),
    ("void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, "
     "__nv_bfloat16, int>(__nv_bfloat16*, float*, int*, __nv_bfloat16*, float*, unsigned int, "
     "unsigned int*, unsigned int)",
     dict(kind="attention", dtype="bf16", impl="flashinfer")),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16>",
     dict(kind="attention", dtype="bf16", impl="flashinfer")),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H128PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
     dict(kind="attention", dtype="fp8", impl="trtllm_gen", phase="prefill", kv_dtype="fp8",
          arch_sm=100)),
    ("fmhaSm100fKernel_QkvBfloat16OBfloat16HQk576HV512HVPerCta256PagedKvDenseP64MultiCtasKvVarSeq"
     "Q16Kv128StaticSwapsAbForGen",
     dict(kind="attention", dtype="bf16", impl="trtllm_gen", phase="decode", kv_dtype="bf16",
          arch_sm=100)),
    ("fmhaSm100aKernel_QBfloat16KvE4m3OBfloat16H128PagedKvDenseP64MultiCtasKvVarSeqQ8Kv128StaticS"
     "wapsAbForGen",
     dict(kind="attention", dtype="bf16", impl="trtllm_gen", phase="decode", kv_dtype="fp8",
          arch_sm=100)),
    ("fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext",
     dict(kind="attention", dtype="fp8", impl="trtllm_gen", phase="prefill", kv_dtype="fp4",
          arch_sm=100)),
    ("void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128, "
     "(vllm::Fp8KVCacheDataType)0, false>(unsigned short*, unsigned short const*)",
     dict(kind="attention", dtype="fp16", impl="vllm_paged", phase="decode", kv_dtype="fp16")),
    ("void vllm::paged_attention_v2_kernel<__nv_bfloat16, unsigned char, 128, 16, 128, "
     "(vllm::Fp8KVCacheDataType)1, false, 512>(float*)",
     dict(kind="attention", dtype="bf16", impl="vllm_paged", phase="decode", kv_dtype="fp8")),
    ("void vllm::paged_attention_v2_reduce_kernel<__nv_bfloat16, 128, 128, 512>(__nv_bfloat16*, "
     "float const*)",
     dict(kind="attention", dtype="bf16", impl="vllm_paged", phase="decode")),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
     "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*)",
     dict(kind="attention", dtype="bf16", impl="kv_cache", kv_dtype="bf16")),
    ("kernel_unified_attention_2d",
     dict(kind="attention", impl="triton")),
    ("kernel_unified_attention_3d",
     dict(kind="attention", impl="triton")),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
     dict(kind="attention", dtype="bf16", impl="xformers", kv_dtype="bf16", arch_sm=80)),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0",
     dict(kind="attention", impl="cudnn", arch_sm=90)),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, "
     "4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
     "cutlass::bfloat16_t> >, false, true, false, false, false, false, false>(pytorch_"
     "flash::Flash_fwd_params)",
     dict(kind="attention", dtype="bf16", impl="fa2", kv_dtype="bf16")),
    ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, "
     "cutlass::bfloat16_t, 512>, true, flash::SharedStorageMLA<Flash_fwd_kernel_traits_mla<576, "
     "64, 64, 8, cutlass::bfloat16_t, 512> > >(Flash_fwd_mla_params)",
     dict(kind="attention", dtype="bf16", impl="flashmla", phase="decode")),
    ("void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaMlaKernelTmaWarpspecialized<"
     "cute::tuple<int,int>, cutlass::gemm::collective::X>>",
     dict(kind="attention", impl="cutlass_mla", phase="decode", arch_sm=100)),
    ("void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaFwdKernelTmaWarpspecialized<"
     "cute::tuple<int,int>, cutlass::gemm::collective::X>>",
     dict(kind="attention", impl="cutlass", arch_sm=100)),
    ("fmhaReductionKernel",
     dict(kind="attention", impl="trtllm_gen", phase="decode")),
    ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<"
     "flashinfer::AttentionKernelTraits<true, 128, 128, 128, 2, __nv_bfloat16, __nv_bfloat16, __"
     "nv_bfloat16, int>>>(flashinfer::BatchPrefillPagedParams)",
     dict(kind="attention", dtype="bf16", impl="flashinfer_fa", phase="prefill")),
    ("void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<"
     "flashinfer::mla::hopper::HopperKernelTraits<true, 2, 64, 64, 512, 64, __nv_bfloat16, __nv_"
     "bfloat16, __nv_bfloat16, int>>(flashinfer::MLAParams)",
     dict(kind="attention", dtype="bf16", impl="flashinfer_fa")),
    ("void flash::mla::sm90::decode::flash_fwd_splitkv_mla_kernel<cutlass::bfloat16_"
     "t>(flash::DenseAttnDecodeParams)",
     dict(kind="attention", dtype="bf16", impl="flashmla", phase="decode", arch_sm=90)),
    ("fmha_cutlassB_f16_aligned_128x64_k128_sm80(PyTorchMemEffAttentionBackward::AttentionBackwar"
     "dKernel<cutlass::arch::Sm80, cutlass::half_t, true, false, true, 128, 64, 128, "
     "false>::Params)",
     dict(kind="attention", dtype="fp16", impl="xformers", kv_dtype="fp16", arch_sm=80)),
    ("_fwd_grouped_kernel_stage1",
     dict(kind="attention", impl="triton", phase="decode")),
    ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, "
     "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>>(flash::Flash_bwd_params)",
     dict(kind="attention", dtype="bf16", impl="fa2", kv_dtype="bf16")),
    ("void vllm::merge_attn_states_kernel<__nv_bfloat16, 128u>(__nv_bfloat16*, float*)",
     dict(kind="attention", dtype="bf16", impl="vllm")),
    ("kernel_cutlass_kernel_flash_attncuteflash_fwd_combineFlashAttentionForwardCombine_object_"
     "at_0x7f",
     dict(kind="attention", impl="fa4")),
    ("void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, unsigned char, "
     "(vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*)",
     dict(kind="attention", dtype="bf16", impl="kv_cache", kv_dtype="fp8")),
    # ---- MoE
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 1u, 128u, 160u, 128u, 1u, 4u, "
     "2u, 1u, true, false, (deep_gemm::GemmType)1>(deep_gemm::MGroupedContiguous)",
     dict(kind="moe", dtype="fp8_block", impl="deepgemm", arch_sm=90)),
    ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 4, 256, 1, 8, 8, true, 4, 8, "
     "false>(int4 const*)",
     dict(kind="moe", dtype="int4", impl="marlin")),
    ("fused_moe_kernel",
     dict(kind="moe", impl="triton")),
    ("fused_moe_kernel_gptq_awq",
     dict(kind="moe", impl="triton")),
    ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, "
     "int, unsigned long)",
     dict(kind="moe", impl="routing")),
    ("void vllm::moe::topkGatingSoftmax<4, 128, 4, 16, int>(float const*, bool const*, float*, "
     "int, int*, int, int, int)",
     dict(kind="moe", impl="routing")),
    ("void vllm::moe::moe_sum_kernel<__nv_bfloat16, 2>(__nv_bfloat16*, __nv_bfloat16 const*, int)",
     dict(kind="moe", impl="routing")),
    ("void vllm::moe::count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, "
     "unsigned long)",
     dict(kind="moe", impl="routing")),
    ("void cutlass::device_kernel<tensorrt_llm::kernels::cutlass_kernels::MoeFCGemm<"
     "cutlass::bfloat16_t, cutlass::float_e2m1_t>>",
     dict(kind="moe", dtype="fp4", impl="cutlass")),
    ("cutlass_moe_mm_sm90",
     dict(kind="moe", impl="cutlass", arch_sm=90)),
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x8x256_s3_moe_sm100f",
     dict(kind="moe", dtype="fp4", impl="trtllm_gen", arch_sm=100)),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu",
     dict(kind="moe", dtype="fp4", impl="triton")),
    ("_p_matmul_ogs",
     dict(kind="moe", impl="triton")),
    ("void vllm::moe::grouped_topk_fused_kernel<__nv_bfloat16>(__nv_bfloat16*)",
     dict(kind="moe", impl="routing")),
    ("void moe::dev::routing::routingRenormalize::routingIndicesClusterKernel<"
     "moe::dev::routing::routingRenormalize::KernelParams>(moe::dev::routing::routingRenormalize:"
     ":KernelParams)",
     dict(kind="moe", impl="routing")),
    ("void tensorrt_llm::kernels::expandInputRowsKernel<__nv_fp4_e2m1, __nv_fp4_e2m1, false>()",
     dict(kind="moe", impl="routing")),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<"
     "cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int>>, cutlass::float_e4m3_t>>",
     dict(kind="moe", dtype="fp8", impl="cutlass")),
    # ---- not LLM kernels
    ("triton_poi_fused_addmm_gelu_0",
     dict(kind="")),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
     dict(kind="")),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<"
     "c10::BFloat16>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<"
     "c10::BFloat16>, std::array<char*, 2ul>)",
     dict(kind="")),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     dict(kind="")),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 3>(c10::BFloat16*, c10::BFloat16 const*, "
     "long, long, c10::BFloat16 const*, float, int, int)",
     dict(kind="")),
    ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
     "warpsize2x2x1_g1_tensor16x8x16_kernel",
     dict(kind="")),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheHeadParallelismKernel<false, 128u, 8u, "
     "16u, __nv_bfloat16, long>(__nv_bfloat16*)",
     dict(kind="")),
    ("void cutlass::conv::kernel::ImplicitGemmConvolution<cutlass_80_tensorop_f16_s16816fprop>",
     dict(kind="")),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
     "unsigned int, 2, 2, -2, true>",
     dict(kind="")),
]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    return case[0].removeprefix("void ")[:60]


@pytest.mark.parametrize(("name", "expected"), CASES, ids=[_id(c) for c in CASES])
def test_classify(name: str, expected: dict[str, Any]) -> None:
    assert classify(name) == LlmKernel(**expected)


def test_the_table_covers_every_kind() -> None:
    assert len(CASES) >= 45
    kinds = {classify(name).kind for name, _ in CASES}
    assert kinds == {"gemm", "attention", "moe", "collective", ""}


@pytest.mark.parametrize("name", [
    "fused_moe_kernel",  # not a GEMM
    "marlin_moe_wna16",  # not a dense Marlin GEMM
    "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(deep_gemm::GemmType)1>(deep_gemm::MGroupedMasked)",
])
def test_moe_wins_over_gemm(name: str) -> None:
    assert classify(name).kind == "moe"


def test_ordering_traps() -> None:
    # NCCL's reduce-scatter is a collective, not a reduction kernel
    assert classify("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL").collective == "reduce_scatter"
    # an attention kernel templated on cutlass::gemm stays attention
    fa3 = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::gemm::GemmShape<1>>>"
    assert classify(fa3).kind == "attention"
    # FlashMLA's split-KV kernel is MLA, not FA2's split-KV kernel
    assert classify("void flash::flash_fwd_splitkv_mla_kernel<>").impl == "flashmla"
    # CUDA's int4 vector type in an argument list is no int4 dtype
    assert classify("void marlin::Marlin<__nv_bfloat16, vllm::kFE4M3fn.id()>(int4 const*)"
                    ).dtype == "fp8"
    # NumericConverter in a CUTLASS GEMM's template is no convolution
    assert classify("cutlass::device_kernel<GemmUniversal<NumericConverter<half_t>>>").kind == \
        "gemm"


def test_unknown_and_empty_names() -> None:
    assert classify("") == LlmKernel(kind="")
    assert classify("void at::native::vectorized_elementwise_kernel<4>") == LlmKernel(kind="")
    assert classify("Memcpy HtoD (Pinned -> Device)").kind == ""


def test_classify_is_cached_and_fast_on_repeated_names() -> None:
    names = [name for name, _ in CASES]
    stream = (names * (100_000 // len(names) + 1))[:100_000]
    classify.cache_clear()
    t0 = time.perf_counter()
    kernels = [classify(name) for name in stream]
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0
    info = classify.cache_info()
    assert info.misses == len(set(stream))
    assert info.hits == len(stream) - len(set(stream))
    assert kernels[0] is classify(stream[0])


def test_classify_many_matches_classify_per_field() -> None:
    names = np.array([name for name, _ in CASES] * 3, dtype=object)
    out = classify_many(names)
    assert tuple(out) == FIELDS
    for field, values in out.items():
        assert values.dtype == object
        assert values.shape == names.shape
        assert values.tolist() == [getattr(classify(n), field) for n in names]


def test_classify_many_classifies_each_distinct_name_once() -> None:
    names = np.array(["ncclDevKernel_SendRecv", "fused_moe_kernel", "nvjet_tst_64x8_TNT"] * 50_000,
                     dtype=object)
    classify.cache_clear()
    t0 = time.perf_counter()
    out = classify_many(names)
    assert time.perf_counter() - t0 < 2.0
    assert classify.cache_info().misses == 3
    assert classify.cache_info().hits == 0
    assert out["kind"][:3].tolist() == ["collective", "moe", "gemm"]
    assert out["collective"][0] == "send_recv"


def test_classify_many_keeps_shape_and_reads_non_strings_as_empty() -> None:
    names = np.array([["fused_moe_kernel", None], [float("nan"), "ncclDevKernel_SendRecv"]],
                     dtype=object)
    out = classify_many(names)
    assert out["kind"].shape == (2, 2)
    assert out["kind"].tolist() == [["moe", ""], ["", "collective"]]
    assert out["arch_sm"].tolist() == [[0, 0], [0, 0]]
    empty = classify_many(np.array([], dtype=object))
    assert all(v.shape == (0,) for v in empty.values())


def test_classify_many_takes_unicode_arrays() -> None:
    out = classify_many(np.array(["nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT"]))
    assert out["impl"].tolist() == ["nvjet"]
    assert out["arch_sm"].tolist() == [90]

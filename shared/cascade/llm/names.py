"""Kernel names of LLM serving stacks -> an LLM kernel vocabulary.

A GPU trace (PyTorch profiler, Nsight Systems) names each kernel by its (usually demangled)
symbol: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``, ``nvjet_sm90_tst_128x256_...``,
``void flash::flash_fwd_splitkv_kernel<...>``, ``fmhaSm100aKernel_QkvE4m3OBfloat16...``.
:func:`classify` reads one such name into an :class:`LlmKernel`: what it does (``kind``: gemm,
attention, moe, collective), which library it comes from (``impl``), the math dtype, the
attention phase and KV-cache dtype, the NCCL collective / algorithm / protocol and the SM
generation it was compiled for -- each only where the name says so, ``""`` / ``0`` otherwise.

Families are tried in a fixed order, most specific first: collectives (NCCL, DeepEP, custom
all-reduces), MoE (routing helpers, grouped / fused expert GEMMs), attention, GEMM. So
``fused_moe_kernel`` is MoE and not a GEMM, ``flash_fwd_splitkv_combine_kernel`` is attention,
and an attention kernel whose template arguments mention ``cutlass::gemm`` stays attention.
Names of no family (elementwise, norms, convolutions, Inductor pointwise kernels) get
``kind=""``.

Classification is cached per distinct name (:func:`classify` is an ``lru_cache``), and
:func:`classify_many` classifies each distinct name of an array once. No I/O.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import msgspec
import numpy as np

__all__ = ["FIELDS", "LlmKernel", "classify", "classify_many"]


class LlmKernel(msgspec.Struct, frozen=True, kw_only=True):
    """What a kernel name says about an LLM kernel; ``""`` / ``0`` where it says nothing."""

    kind: str
    """``"gemm"``, ``"attention"``, ``"moe"``, ``"collective"``, or ``""`` (not an LLM kernel)"""
    dtype: str = ""
    """math / weight dtype: ``"bf16"``, ``"fp16"``, ``"fp8"``, ``"fp8_block"`` (block-scaled
    FP8: DeepGEMM, blockwise CUTLASS, MXFP8), ``"fp4"`` (NVFP4 / MXFP4), ``"int4"``,
    ``"int8"``; ``"fp32"`` / ``"tf32"`` / integer names for cuBLAS and NCCL where said"""
    impl: str = ""
    """implementation family: ``"cublas"``, ``"nvjet"``, ``"cutlass"``, ``"deepgemm"``,
    ``"flashinfer"``, ``"flashinfer_fa"``, ``"triton"``, ``"marlin"``, ``"machete"``, ``"fa2"``,
    ``"fa3"``, ``"fa4"``, ``"trtllm_gen"``, ``"trtllm"``, ``"cudnn"``, ``"xformers"``,
    ``"vllm_paged"``, ``"kv_cache"``, ``"flashmla"``, ``"cutlass_mla"``, ``"routing"``,
    ``"nccl"``, ``"vllm_custom"``, ``"multimem"``, ``"symm_mem"``, ``"trtllm_ar"``,
    ``"deepep"``, ``"pplx"``, ``"vllm"``"""
    phase: str = ""
    """attention: ``"prefill"`` or ``"decode"`` where the name says; ``""`` otherwise"""
    collective: str = ""
    """``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"all_to_all"``,
    ``"send_recv"``, ``"broadcast"``, ``"reduce"``, or ``""``"""
    algo: str = ""
    """NCCL algorithm: ``"ring"``, ``"tree"``, ``"nvls"``, ``"nvls_tree"``, ``"collnet"``,
    ``"pat"``, or ``""``"""
    protocol: str = ""
    """NCCL protocol: ``"ll"``, ``"ll128"``, ``"simple"``, or ``""``"""
    kv_dtype: str = ""
    """attention KV-cache dtype where the name says (``"fp8"``, ``"bf16"``, ``"fp16"``,
    ``"fp4"``), ``""`` otherwise"""
    arch_sm: int = 0
    """SM generation the kernel was compiled for where the name says (``sm90`` -> 90,
    ``Sm100a`` -> 100, ``ampere_`` -> 80), 0 otherwise"""


#: Field names of :class:`LlmKernel`, in order (the keys of :func:`classify_many`).
FIELDS: tuple[str, ...] = LlmKernel.__struct_fields__

_NONE = LlmKernel(kind="")

# ---- shared readers: SM generation, dtype --------------------------------------------------

#: ``sm90``, ``sm_90a``, ``_sm100f``, ``nvjet_sm103``, ``FwdSm90``, ``fmhaSm100aKernel``,
#: ``cutlass::arch::Sm80``: a lower-case ``sm`` must not follow a letter, ``Sm`` may.
_ARCH_SM = re.compile(r"(?:(?<![A-Za-z])sm_?|Sm)(\d{2,3})(?!\d)")
_ARCH_CUTLASS2 = re.compile(r"(?<![A-Za-z0-9])cutlass_(\d{2})_")
_ARCH_CODENAME = re.compile(r"(?<![A-Za-z])(maxwell|volta|turing|ampere|hopper|blackwell)_")
_CODENAME_SM = {"maxwell": 50, "volta": 70, "turing": 75, "ampere": 80, "hopper": 90,
                "blackwell": 100}

#: Dtype tokens, most specific (lowest precision) first: the first hit is the kernel's
#: math / weight dtype (a W4A16 GEMM mentions bf16 too, an FP8 GEMM its bf16 output).
_DTYPE_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp4", re.compile(r"(?i)e2m1|fp4|float4_e2m1")),
    ("int4", re.compile(r"(?i)u?int4b_t|w4a(?:16|8)|wna16|u4b8|\bku4|(?<![a-z])int4(?=_|$)")),
    ("fp8", re.compile(r"(?i)e4m3|e5m2|fp8|float8")),
    ("int8", re.compile(r"(?i)(?<![a-z])int8(?:_t)?(?![a-z0-9])|(?<![a-z])signed char|i8i8|"
                        r"s8s8")),
    ("bf16", re.compile(r"(?i)bf16|bfloat16")),
    ("fp16", re.compile(r"(?i)fp16|(?<![b])f16|(?<![b])float16|(?<![a-z])half|half_t")),
)
#: Markers of block / group scaled FP8 (DeepGEMM 1D2D, CUTLASS blockwise, MXFP8's ue8m0
#: scales, TRT-LLM-gen ``dsFp8``, vLLM ``w8a8_block``).
_FP8_BLOCK = re.compile(
    r"(?i)block_?wise|group_?wise|block_?scal|1d2d|1d1d|ue8m0|mxfp8|mxe4m3|dsfp8|w8a8_block|"
    r"block_fp8|fp8_block|deep_?gemm")
#: A trailing ``(...)`` argument list (one level of nested parentheses allowed).
_ARGS = re.compile(r"\((?:[^()]|\([^()]*\))*\)\s*$")


def _arch(name: str) -> int:
    """The SM generation the name says the kernel was compiled for, 0 if none."""
    m = _ARCH_SM.search(name)
    if m is not None:
        return int(m.group(1))
    m = _ARCH_CUTLASS2.search(name)
    if m is not None:
        return int(m.group(1))
    m = _ARCH_CODENAME.search(name)
    return _CODENAME_SM[m.group(1)] if m is not None else 0


def _strip_args(name: str) -> str:
    """The name without its trailing argument list: argument types (CUDA's ``int4`` vector,
    ``float*`` buffers) are no dtype of the kernel's math."""
    return _ARGS.sub("", name)


def _dtype(name: str) -> str:
    """The lowest-precision dtype token in the name (its argument list left out), ``fp8``
    refined to ``fp8_block``."""
    name = _strip_args(name)
    for dtype, pattern in _DTYPE_TOKENS:
        if pattern.search(name):
            if dtype == "fp8" and _FP8_BLOCK.search(name):
                return "fp8_block"
            return dtype
    return ""


#: C / CUDA / TRT-LLM type spellings in template arguments and TRT-LLM-gen names.
_CTYPES = {
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "bfloat16": "bf16", "bfloat16_t": "bf16",
    "bf16": "bf16", "half": "fp16", "__half": "fp16", "half_t": "fp16", "f16": "fp16",
    "fp16": "fp16", "unsigned short": "fp16", "uint16_t": "fp16", "float": "fp32",
    "fp32": "fp32", "__nv_fp8_e4m3": "fp8", "__nv_fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    "float_e4m3_t": "fp8", "float_e5m2_t": "fp8", "unsigned char": "fp8", "uint8_t": "fp8",
    "e2m1": "fp4", "__nv_fp4_e2m1": "fp4", "float_e2m1_t": "fp4", "mxe2m1": "fp4",
    "mxe4m3": "fp8",
}


def _ctype(text: str) -> str:
    """One template argument / type token -> dtype (``cutlass::bfloat16_t`` -> ``bf16``)."""
    key = text.strip().rsplit("::", 1)[-1].lower()
    return _CTYPES.get(key, "")


# ---- collectives ---------------------------------------------------------------------------

_NCCL = re.compile(r"^(?:void\s+)?nccl(?:Dev)?Kernel_([A-Za-z]+)")
_NCCL_OP_RECORD = re.compile(r"^nccl:(\w+)")
_NCCL_ALGO = re.compile(
    r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)(?=_|$)")
_NCCL_PROTO = re.compile(r"_(LL128|LL|SIMPLE)(?=_|$)")
_NCCL_TYPE = re.compile(
    r"_(?:Sum|Prod|Max|Min|MinMax|PreMulSum|SumPostDiv)_((?:__nv_)?[a-z][a-z0-9]*(?:_t)?)")
_NCCL_TYPES = {
    "bf16": "bf16", "bfloat16": "bf16", "__nv_bfloat16": "bf16", "f16": "fp16", "half": "fp16",
    "f32": "fp32", "float": "fp32", "f64": "fp64", "double": "fp64", "f8e4m3": "fp8",
    "f8e5m2": "fp8", "i8": "int8", "int8_t": "int8", "u8": "uint8", "uint8_t": "uint8",
    "i32": "int32", "int32_t": "int32", "u32": "uint32", "uint32_t": "uint32", "i64": "int64",
    "int64_t": "int64", "u64": "uint64", "uint64_t": "uint64",
}
_NCCL_COLLS = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send_recv",
    "AllToAll": "all_to_all", "Generic": "",
}
_NCCL_ALGOS = {"RING": "ring", "TREE": "tree", "COLLNET_DIRECT": "collnet",
               "COLLNET_CHAIN": "collnet", "COLLNET": "collnet", "NVLS_TREE": "nvls_tree",
               "NVLS": "nvls", "PAT": "pat"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

#: Collective named in free text (``multimem_all_reduce``, ``oneShotAllReduce``, ``nccl:...``).
_COLL_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("all_reduce", re.compile(r"(?i)all_?reduce|allreduce")),
    ("reduce_scatter", re.compile(r"(?i)reduce_?scatter")),
    ("all_gather", re.compile(r"(?i)all_?gather")),
    ("all_to_all", re.compile(r"(?i)all_?to_?all|alltoall")),
    ("broadcast", re.compile(r"(?i)broadcast")),
    ("send_recv", re.compile(r"(?i)send|recv")),
)

_DEEPEP = re.compile(r"deep_ep::|(?<![A-Za-z])pplx::")
_VLLM_CUSTOM_AR = re.compile(r"(?i)cross_device_reduce|custom_?all_?reduce|quick_?reduce")
_SYMM_MEM = re.compile(r"multimem|symmetric_memory|one_shot_all_reduce|two_shot_all_reduce")
_TRTLLM_AR = re.compile(r"(?i)allreduce_fusion|ar_fusion|lamport|trtllm_?allreduce|"
                        r"tensorrt_llm.*all_?reduce|flashinfer.*all_?reduce|"
                        r"one_?shot_?all_?reduce|two_?shot_?all_?reduce|mnnvl.*all_?reduce")
_FLOAT_WORD = re.compile(r"(?<![A-Za-z0-9_])float(?![A-Za-z0-9_])")


def _coll_word(name: str) -> str:
    for coll, pattern in _COLL_WORDS:
        if pattern.search(name):
            return coll
    return ""


def _nccl(name: str) -> LlmKernel | None:
    """``ncclDevKernel_<Coll>[_<Op>_<type>]_<ALGO>_<PROTO>`` (NCCL >= 2.19),
    ``ncclKernel_<Coll>_<ALGO>_<PROTO>_<Op>_<type>`` (older), ``nccl:<op>`` record names."""
    m = _NCCL.match(name)
    if m is None:
        rec = _NCCL_OP_RECORD.match(name)
        if rec is None:
            return None
        return LlmKernel(kind="collective", impl="nccl", collective=_coll_word(rec.group(1)))
    word = m.group(1)
    coll = _NCCL_COLLS.get(word)
    if coll is None:
        coll = _CAMEL.sub("_", word).lower()
    body = name[m.end():].split("(", 1)[0]
    algo = _NCCL_ALGO.search(body)
    proto = _NCCL_PROTO.search(body)
    dtype = _NCCL_TYPE.search(body)
    return LlmKernel(
        kind="collective", impl="nccl", collective=coll,
        algo=_NCCL_ALGOS[algo.group(1)] if algo else "",
        protocol=proto.group(1).lower() if proto else "",
        dtype=_NCCL_TYPES.get(dtype.group(1), "") if dtype else "")


def _collective(name: str) -> LlmKernel | None:
    """NCCL, DeepEP / pplx all-to-all, vLLM custom, symmetric-memory and TRT-LLM all-reduces."""
    if "nccl" in name:
        hit = _nccl(name)
        if hit is not None:
            return hit
    if _DEEPEP.search(name):
        impl = "deepep" if "deep_ep" in name else "pplx"
        return LlmKernel(kind="collective", impl=impl, collective="all_to_all")
    if _VLLM_CUSTOM_AR.search(name):
        impl = "vllm_custom"
    elif _SYMM_MEM.search(name):
        impl = "multimem" if "multimem" in name else "symm_mem"
    elif _TRTLLM_AR.search(name):
        impl = "trtllm_ar"
    else:
        return None
    dtype = _dtype(name) or ("fp32" if _FLOAT_WORD.search(name) else "")
    return LlmKernel(kind="collective", impl=impl, collective=_coll_word(name) or "all_reduce",
                     dtype=dtype)


# ---- MoE ----------------------------------------------------------------------------------

#: Routing / permutation helpers around the expert GEMMs.
_MOE_ROUTING = re.compile(
    r"(?i)moe_align|align_block_size|topk_?gating|topk_?softmax|moe_sum|count_and_sort_expert|"
    r"sort_expert|expert_tokens|expert_offsets|grouped_?topk|moe_fused_gate|moe_?permute|"
    r"moe_?unpermute|expandinputrows|finalizemoerouting|moe::dev::routing|"
    r"routing(?:renormalize|deepseek|llama4|indices|main)|moe_?topk|get_cutlass_moe_mm_data|"
    r"compute_problem_sizes|compute_arg_sorts|shuffle_rows|build_?expert_?maps")
#: ``moe`` as a word part (``fused_moe``, ``MoeFCGemm``, ``finalizeMoe``; not ``homoeo``),
#: experts, gpt-oss ``matmul_ogs``, grouped GEMMs (DeepGEMM m-grouped, CUTLASS grouped).
_MOE = re.compile(r"(?<![a-z])(?i:moe)|Mo[eE]|(?<![a-z])[Ee]xperts?(?![a-z])|matmul_ogs|"
                  r"MGrouped|m_grouped|GroupProblemShape")
_MARLIN = re.compile(r"(?i)marlin")
_DEEPGEMM = re.compile(r"deep_gemm|(?<![A-Za-z])sm\d+_(?:m_grouped_|k_grouped_)?"
                       r"(?:fp8|bf16|fp4|fp8_fp4)_gemm_(?:1d[12]d_)?impl")
_TRTLLM_GEN_GEMM = re.compile(r"^(?:void\s+)?(?:bmm|gemm|gemmGatedAct|batchedGemm)_([A-Z]\w*?)_"
                              r"([A-Z][A-Za-z0-9]*?)_")
_TRITON_MOE = re.compile(r"fused_moe_kernel|matmul_ogs|(?i:triton)")


def _marlin_dtype(name: str) -> str:
    """Marlin's weight dtype: ``u4`` / ``int4`` / ``wna16`` / ``w4a16`` -> int4, fp4, fp8."""
    name = _strip_args(name)
    if re.search(r"(?i)fe2m1|e2m1|fp4", name):
        return "fp4"
    if re.search(r"(?i)(?<![a-z0-9])k?u4|int4|wna16|w4a16|u4b8", name):
        return "int4"
    if re.search(r"(?i)fp8|fe4m3|e4m3", name):
        return "fp8"
    if re.search(r"(?i)(?<![a-z0-9])k?u8|w8a16|int8", name):
        return "int8"
    return ""


def _trtllm_gen_gemm_dtype(name: str, m: re.Match[str]) -> str:
    """``bmm_<out>_<A><B>_<acc>_...``: the input pair's dtype (E2m1 fp4, E4m3 fp8, ...)."""
    inputs = m.group(2)
    dtype = _dtype(inputs)
    if dtype == "fp8" and (_FP8_BLOCK.search(name) or inputs.count("Mx") == 2):
        return "fp8_block"
    return dtype


def _moe(name: str) -> LlmKernel | None:
    """Routing helpers and fused / grouped expert GEMMs."""
    if _MOE_ROUTING.search(name):
        return LlmKernel(kind="moe", impl="routing", arch_sm=_arch(name))
    if not _MOE.search(name):
        return None
    gen = _TRTLLM_GEN_GEMM.match(name)
    if _MARLIN.search(name):
        return LlmKernel(kind="moe", impl="marlin", dtype=_marlin_dtype(name),
                         arch_sm=_arch(name))
    if _DEEPGEMM.search(name):
        impl = "deepgemm"
    elif gen is not None:
        return LlmKernel(kind="moe", impl="trtllm_gen", dtype=_trtllm_gen_gemm_dtype(name, gen),
                         arch_sm=_arch(name))
    elif _TRITON_MOE.search(name):
        impl = "triton"
    elif "cutlass" in name or "MoeFCGemm" in name:
        impl = "cutlass"
    elif "flashinfer" in name:
        impl = "flashinfer"
    else:
        impl = ""
    return LlmKernel(kind="moe", impl=impl, dtype=_dtype(name), arch_sm=_arch(name))


# ---- attention ----------------------------------------------------------------------------

_FLASHMLA = re.compile(r"(?i)flash_?mla|flash_fwd_\w*mla|flash::mla")
_CUTLASS_MLA = re.compile(r"(?i)cutlass_?mla|FmhaMla|sm100_?fmha_?mla|MlaKernel")
_TRTLLM_FMHA = re.compile(r"^(?:void\s+)?fmhaSm\d+[a-z]?Kernel_|fmhaReductionKernel|"
                          r"trtllm_?gen\w*fmha")
_TRTLLM_QKV = re.compile(r"Qkv([A-Z][a-z0-9]+)")
_TRTLLM_Q_KV = re.compile(r"Q([A-Z][a-z0-9]+)Kv([A-Z][a-z0-9]+)")
_TRTLLM_MHA = re.compile(r"(?i)masked_?multihead_?attention|mmha|xqa_?kernel|kernel_mha")
_FLASHINFER_ATTN = re.compile(
    r"Batch(?:Prefill|Decode)With\w*KVCache|Single(?:Prefill|Decode)With\w*KVCache|"
    r"MergeStates?Kernel|MergeStates|BatchPOD|BatchMLA\w*Kernel|PrefillWithKVCacheKernel|"
    r"flashinfer::\w*(?:attention|mla)")
_FLASHINFER_FA = re.compile(r"(?i)hopper|sm90|CollectiveMainloop")
_FLASHINFER_PARAMS = re.compile(r"Params<\s*([\w:\s]+?)\s*,\s*([\w:\s]+?)\s*,")
_FP8_CTYPE = re.compile(r"__nv_fp8_e[45]m[23]")
_FA3 = re.compile(r"FlashAttn(?:Fwd|Bwd)(?:Sm\d+|Combine)|flash::prepare_varlen|"
                  r"flash::compute_attn_ws")
_FA4 = re.compile(r"FlashAttention(?:Forward|Backward)(?:Sm\d+|Combine)|"
                  r"flash_attn\w*cute|cute\w*flash_attn|flash_(?:fwd|bwd)_sm1\d\d")
_FA2 = re.compile(r"(?i)flash_(?:fwd|bwd)|Flash_(?:fwd|bwd)_kernel_traits")
_VLLM_PAGED = re.compile(r"paged_attention_v\d")
_VLLM_TEMPLATE = re.compile(
    r"(?:paged_attention_v\d_(?:reduce_)?kernel|(?:reshape|concat)_and_cache\w*?_kernel)"
    r"<\s*([\w:\s]+?)\s*,\s*([\w:\s]+?)\s*,")
_VLLM_FP8_KV = re.compile(r"Fp8KVCacheDataType\)\s*[12]")
_KV_CACHE = re.compile(r"reshape_and_cache|concat_and_cache")
_TRITON_ATTN = re.compile(
    r"unified_attention|_fwd_(?:grouped_)?kernel_stage[12]|(?<![A-Za-z])_attn_fwd|"
    r"flex_attention|triton_\w*attention|prefix_prefill|merge_attn_states|lightning_attn")
_XFORMERS = re.compile(r"fmha_cutlass[FB]|PyTorchMemEffAttention|AttentionKernel<|"
                       r"AttentionBackwardKernel|xformers|efficient_attention")
_CUDNN_ATTN = re.compile(r"(?i)cudnn\w*(?:sdpa|fmha|flash|attention|mha)")
_ATTN_FALLBACK = re.compile(r"(?i)fmha|flash_?attn|attention|sdpa")
_PREFILL = re.compile(r"(?i)prefill|context")
_DECODE = re.compile(r"(?i)decode|(?<![a-z])gen(?:eration)?(?![a-z])|ForGen")


def _phase(name: str) -> str:
    if _PREFILL.search(name):
        return "prefill"
    if _DECODE.search(name):
        return "decode"
    return ""


def _same_kv(dtype: str) -> str:
    """KV dtype of kernels whose Q, K and V share one element type."""
    return dtype if dtype in ("bf16", "fp16", "fp8") else ""


def _trtllm_fmha(name: str) -> LlmKernel:
    """``fmhaSm100aKernel_QkvE4m3OBfloat16H128PagedKvCausal...PersistentContext`` and kin."""
    both = _TRTLLM_QKV.search(name)
    if both is not None:
        dtype = kv = _ctype(both.group(1))
    else:
        split = _TRTLLM_Q_KV.search(name)
        dtype, kv = (_ctype(split.group(1)), _ctype(split.group(2))) if split else ("", "")
    if "Context" in name:
        phase = "prefill"
    elif "Gen" in name or "fmhaReduction" in name:
        phase = "decode"
    else:
        phase = ""
    return LlmKernel(kind="attention", impl="trtllm_gen", dtype=dtype, kv_dtype=kv,
                     phase=phase, arch_sm=_arch(name))


def _flashinfer_attn(name: str) -> LlmKernel:
    """FlashInfer prefill / decode / POD / MLA / merge-states kernels."""
    params = _FLASHINFER_PARAMS.search(name)
    if params is not None:
        dtype, kv = _ctype(params.group(1)), _ctype(params.group(2))
    else:
        dtype = _dtype(name)
        kv = "fp8" if _FP8_CTYPE.search(name) and "KVCache" in name else ""
    impl = "flashinfer_fa" if _FLASHINFER_FA.search(name) else "flashinfer"
    if "Prefill" in name:
        phase = "prefill"
    elif "Decode" in name:
        phase = "decode"
    else:
        phase = ""
    return LlmKernel(kind="attention", impl=impl, dtype=dtype, kv_dtype=kv, phase=phase,
                     arch_sm=_arch(name))


def _vllm_cache_types(name: str) -> tuple[str, str]:
    """(dtype, kv dtype) of ``paged_attention_v1_kernel<scalar_t, cache_t, ...>`` and
    ``reshape_and_cache*_kernel<scalar_t, cache_t, Fp8KVCacheDataType>``."""
    m = _VLLM_TEMPLATE.search(name)
    dtype = _ctype(m.group(1)) if m else ""
    if dtype == "fp8":  # uint8 as the first argument is not a query dtype
        dtype = ""
    if _VLLM_FP8_KV.search(name):
        return dtype, "fp8"
    cache = _ctype(m.group(2)) if m else ""
    return dtype, (cache if cache in ("bf16", "fp16", "fp8") else "")


def _attention(name: str) -> LlmKernel | None:
    """Attention kernels: MLA, TRT-LLM-gen FMHA, FlashInfer, FA2/3/4, vLLM, Triton, ..."""
    arch = _arch(name)
    if _FLASHMLA.search(name):
        return LlmKernel(kind="attention", impl="flashmla", phase="decode", dtype=_dtype(name),
                         arch_sm=arch)
    if _CUTLASS_MLA.search(name):
        return LlmKernel(kind="attention", impl="cutlass_mla", phase="decode",
                         dtype=_dtype(name), arch_sm=arch)
    if _TRTLLM_FMHA.search(name):
        return _trtllm_fmha(name)
    if _FLASHINFER_ATTN.search(name):
        return _flashinfer_attn(name)
    for impl, pattern in (("fa3", _FA3), ("fa4", _FA4), ("fa2", _FA2)):
        if pattern.search(name):
            dtype = _dtype(name)
            return LlmKernel(kind="attention", impl=impl, dtype=dtype, kv_dtype=_same_kv(dtype),
                             phase=_phase(name), arch_sm=arch)
    if _VLLM_PAGED.search(name) or _KV_CACHE.search(name):
        dtype, kv = _vllm_cache_types(name)
        paged = _VLLM_PAGED.search(name) is not None
        return LlmKernel(kind="attention", impl="vllm_paged" if paged else "kv_cache",
                         phase="decode" if paged else "", dtype=dtype, kv_dtype=kv, arch_sm=arch)
    if _TRTLLM_MHA.search(name):
        return LlmKernel(kind="attention", impl="trtllm", phase="decode", dtype=_dtype(name),
                         arch_sm=arch)
    if _TRITON_ATTN.search(name):
        impl = "vllm" if "::" in name else "triton"
        phase = "decode" if "_stage" in name else _phase(name)
        return LlmKernel(kind="attention", impl=impl, phase=phase, dtype=_dtype(name),
                         arch_sm=arch)
    if _XFORMERS.search(name):
        dtype = _dtype(name)
        return LlmKernel(kind="attention", impl="xformers", dtype=dtype,
                         kv_dtype=_same_kv(dtype), arch_sm=arch)
    if _CUDNN_ATTN.search(name):
        return LlmKernel(kind="attention", impl="cudnn", dtype=_dtype(name), arch_sm=arch)
    if _ATTN_FALLBACK.search(name):
        impl = "cutlass" if "cutlass" in name else ""
        return LlmKernel(kind="attention", impl=impl, dtype=_dtype(name), phase=_phase(name),
                         arch_sm=arch)
    return None


# ---- GEMM ---------------------------------------------------------------------------------

#: Convolutions (cuDNN / CUTLASS implicit GEMM) and Inductor's non-template kernels are no
#: LLM GEMMs even when their names say ``gemm`` / ``mm``.
_NOT_GEMM = re.compile(r"(?i)fprop|dgrad|wgrad|(?<![a-z])conv(?!ert)|implicit_?gemm|"
                       r"implicit_precomp|winograd|"
                       r"^triton_(?:poi|red|per|for)_")
_GEMM = re.compile(r"(?i)gemm|gemv|matmul|xmma|nvjet|marlin|machete|cublas|tensorop|wgmma|"
                   r"(?:^|[^a-z0-9])(?:scaled_mm|addmm|baddbmm|bmm|mm)(?:$|[^a-z0-9])")
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_")
_NVJET_LETTERS = {"t": "bf16", "h": "fp16"}
_CUBLAS = re.compile(r"xmma|cublas|^(?:void\s+)?(?:maxwell|volta|turing|ampere|hopper)_\w*gemm|"
                     r"gemv2[NT]|gemvNSP|gemvx|gemmk1|splitKreduce|gemmSN")
_CUBLAS_FP16 = re.compile(r"(?<![a-z])h\d{3,5}gemm|hgemm")
_CUBLAS_INT8 = re.compile(r"(?<![a-z])i\d{3,5}gemm|igemm|imma")
_CUBLAS_FP32 = re.compile(r"sgemm|f32f32_f32|(?<![a-z])s\d{3,5}gemm_fp32")
_MACHETE = re.compile(r"(?i)machete")
_TRITON_NAME = re.compile(r"_?[a-z][a-z0-9_]*")


def _nvjet_dtype(name: str) -> str:
    """``nvjet_[smNN_]<types>_...``: ``tst`` bf16, ``hsh`` fp16, ``qqtst`` fp8 (``UE8M0``
    scale vectors: MXFP8, block-scaled; ``vec16UE4M3`` scales: NVFP4); other type letters
    (``s``: fp32 or tf32) are not decoded."""
    m = _NVJET.search(name)
    if m is None:
        return ""
    letters = m.group(1)
    if "vec16UE4M3" in name:  # NVFP4: 16-element blocks with UE4M3 scales
        return "fp4"
    if letters.startswith("qq"):
        return "fp8_block" if "UE8M0" in name else "fp8"
    return _NVJET_LETTERS.get(letters[0], "")


def _cublas_dtype(name: str) -> str:
    dtype = _dtype(name)
    if dtype:
        return dtype
    if _CUBLAS_FP16.search(name):
        return "fp16"
    if _CUBLAS_INT8.search(name):
        return "int8"
    if "tf32" in name:
        return "tf32"
    return "fp32" if _CUBLAS_FP32.search(name) else ""


def _gemm(name: str) -> LlmKernel | None:
    """Dense GEMMs: cuBLAS (nvjet, xmma), CUTLASS, DeepGEMM, Marlin, Machete, TRT-LLM-gen,
    FlashInfer, Triton."""
    if _NOT_GEMM.search(name) or not _GEMM.search(name):
        return None
    arch = _arch(name)
    gen = _TRTLLM_GEN_GEMM.match(name)
    if "nvjet" in name:
        return LlmKernel(kind="gemm", impl="nvjet", dtype=_nvjet_dtype(name), arch_sm=arch)
    if _DEEPGEMM.search(name):
        impl, dtype = "deepgemm", _dtype(name)
    elif _MARLIN.search(name):
        impl, dtype = "marlin", _marlin_dtype(name)
    elif _MACHETE.search(name):
        impl, dtype = "machete", _dtype(name)
    elif gen is not None:
        impl, dtype = "trtllm_gen", _trtllm_gen_gemm_dtype(name, gen)
    elif _CUBLAS.search(name):
        impl, dtype = "cublas", _cublas_dtype(name)
    elif "flashinfer" in name:
        impl, dtype = "flashinfer", _dtype(name)
    elif "cutlass" in name:
        impl, dtype = "cutlass", _dtype(name)
    elif _TRITON_NAME.fullmatch(name):
        impl, dtype = "triton", _dtype(name)
    else:
        impl, dtype = "", _dtype(name)
    return LlmKernel(kind="gemm", impl=impl, dtype=dtype, arch_sm=arch)


# ---- entry points -------------------------------------------------------------------------

_FAMILIES = (_collective, _moe, _attention, _gemm)


@lru_cache(maxsize=1 << 16)
def classify(name: str) -> LlmKernel:
    """What the kernel name ``name`` says about an LLM kernel (cached per distinct name).

    ``kind=""`` for kernels of no LLM family (elementwise, norms, convolutions, copies)."""
    for family in _FAMILIES:
        hit = family(name)
        if hit is not None:
            return hit
    return _NONE


def classify_many(names: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """:func:`classify` over an array of names, each distinct name classified once.

    Returns one object array per :class:`LlmKernel` field (:data:`FIELDS`), shaped like
    ``names`` (``arch_sm`` holds Python ints). Entries that are not ``str`` (``None``, NaN)
    read as ``""`` and classify as ``kind=""``."""
    flat = np.asarray(names, dtype=object).ravel().tolist()
    index: dict[str, int] = {}
    codes = np.fromiter(
        (index.setdefault(s if isinstance(s, str) else "", len(index)) for s in flat),
        dtype=np.intp, count=len(flat))
    kernels = [classify(s) for s in index]
    out: dict[str, np.ndarray[Any, Any]] = {}
    shape = np.shape(names)
    for field in FIELDS:
        values = np.empty(len(kernels), dtype=object)
        values[:] = [getattr(k, field) for k in kernels]
        out[field] = values[codes].reshape(shape)
    return out

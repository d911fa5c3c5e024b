#!/usr/bin/env python3
"""Write the SYNTHETIC replica of the `opt125m-h100-e2e` sample: a Cascade kernel timeline.

The timeline is built from OPT-125m's architecture, not measured: one row per
CUDA kernel that an eager PyTorch + Hugging Face ``generate()`` greedy run of
``facebook/opt-125m`` (fp16, ``attn_implementation="eager"``, DynamicCache)
launches on one stream, with shapes, FLOPs, bytes, a first-principles
duration on an H100 SXM (source GPU ``SM90_H100``) and host launch times from
documented per-launch costs. No number here is fitted to the recorded
reference results of the sample (see README.md).

Steps: step 0 is the prefill of the 6 prompt tokens (context 6) and yields
generated token 1; steps 1..31 are decode steps of one token each at contexts
7..37 (the KV cache holds 6+i-1 tokens, plus the new one), yielding tokens
2..32. So 32 forward passes generate exactly 32 new tokens.

Usage::

    python samples/opt125m-h100-e2e/generate_timeline.py            # (re)write synthetic/
    python samples/opt125m-h100-e2e/generate_timeline.py --check    # compare, exit 1 on drift
    python samples/opt125m-h100-e2e/generate_timeline.py --out DIR  # write elsewhere

Only the standard library, numpy and Cascade's own ``cascade.kerneltable``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
try:
    from cascade.kerneltable import KernelTable
except ImportError:  # running from a plain checkout without the editable install
    sys.path.insert(0, str(HERE.parents[1] / "shared"))
    from cascade.kerneltable import KernelTable

# ---- workload: facebook/opt-125m config.json -------------------------------------------------
HIDDEN = 768
LAYERS = 12
HEADS = 12
HEAD_DIM = HIDDEN // HEADS  # 64
FFN = 3072
VOCAB = 50272
MAX_POSITIONS = 2048
POS_OFFSET = 2  # OPTLearnedPositionalEmbedding: table of 2048 + 2 rows, index = position + 2
PROMPT = "Hello, my name is"
PROMPT_TOKENS = 6  # "</s>" BOS + 5 GPT-2 BPE tokens: Hello , my name is
NEW_TOKENS = 32
BATCH = 1
FP16 = 2  # bytes per element
FP32 = 4
I64 = 8
BOOL = 1

# ---- source GPU: H100 SXM5 80GB (Accel-Sim config SM90_H100), public figures (gpus.md) ----------
SOURCE_GPU = "SM90_H100"
SM_VERSION = 90
TENSOR_FP16_PEAK = 989e12  # FLOP/s, dense
SIMT_FP32_PEAK = 67e12  # FLOP/s
DRAM_BW = 3.35e12  # B/s
TENSOR_EFFICIENCY = 0.60  # fraction of the tensor peak small cuBLAS GEMMs reach
SIMT_EFFICIENCY = 0.50
DRAM_EFFICIENCY = 0.70  # fraction of HBM bandwidth a streaming kernel reaches
#: fixed device time per kernel class (ramp-up, launch of the grid, tail), ns
FIXED_NS = {"elementwise": 2000.0, "reduction": 2500.0, "gemm": 3500.0}

# ---- host (eager PyTorch + HF generate) launch costs, ns ------------------------------------
STREAM = 7
HOST_OP_NS = 8000.0  # first kernel of an ATen op (dispatcher, TensorIterator, launch)
HOST_GEMM_OP_NS = 12000.0  # first kernel of a cuBLAS-backed op (linear/matmul: heuristics, handle)
HOST_INTRA_OP_NS = 4000.0  # a further kernel launched by the same ATen op
HOST_LAYER_PY_NS = 25000.0  # Python/nn.Module overhead per decoder layer not tied to a kernel
HOST_FORWARD_PY_NS = 60000.0  # per model forward: wrappers, mask helpers, output dataclasses
HOST_STEP_PY_NS = 150000.0  # per generate() iteration: prepare_inputs, kwargs update, criteria
HOST_SETUP_NS = 200000.0  # generate() entry: config validation, logits processors, cache setup
SYNC_RETURN_NS = 10000.0  # cudaStreamSynchronize wake-up + 1-element D2H copy of `.item()`

OUT_DIR = HERE / "synthetic"
CSV_NAME = "timeline.csv.gz"
MANIFEST_NAME = "manifest.json"

#: columns written, in order (all from cascade.kerneltable.COLUMNS)
CSV_COLUMNS: tuple[str, ...] = (
    "name", "kernel_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs",
    "smem_bytes", "sm_version", "stream", "host_launch_ns", "start_ns", "duration_ns",
    "sync_after", "step", "step_kind", "step_tokens", "step_context", "op", "dtype", "flops",
    "bytes", "batch", "m", "n", "k",
)

# ---- kernel names (CUDA 12 / PyTorch 2.x / cuBLAS 12 style) ---------------------------------
_VEC = "void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {a}ul>>(int, {f}, std::array<char*, {a}ul>)"
_STRIDED = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<{f}>"
            "(at::TensorIteratorBase&, {f} const&)::{{lambda(int)#1}}>(int, ...)")
_CAST = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda"
         "(at::TensorIteratorBase&)::{{lambda()#3}}::operator()() const::{{lambda()#{i}}}::operator()() "
         "const::{{lambda({t})#1}}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, "
         "TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
         "at::native::memory::StoreWithCast<1>>(int, ...)")
_COPY_F = ("at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{{lambda()#3}}::operator()() "
           "const::{{lambda()#{i}}}::operator()() const::{{lambda({t})#1}}")
_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{t}, {ops}, unsigned int, {o}, 4, 4>>(at::native::ReduceOp<{t}, {ops}, unsigned int, {o}, 4, 4>)"
K_LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float>"
                "(int, float, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)")
K_SOFTMAX = ("void (anonymous namespace)::softmax_warp_forward<c10::Half, float, float, {l}, false, false>"
             "(float*, c10::Half const*, int, int, int, bool const*, int, bool)")
K_EMBED = ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::Half, long, unsigned int, 2, 2, -2>"
           "(at::cuda::detail::TensorInfo<c10::Half, unsigned int>, at::cuda::detail::TensorInfo<c10::Half const, "
           "unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, long)")
K_INDEX = ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::"
           "index_kernel_impl<at::native::OpaqueType<8>>(at::TensorIteratorBase&, c10::ArrayRef<long>, "
           "c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, "
           "c10::ArrayRef<long>, c10::ArrayRef<long>, ...)::{lambda(int)#1}>(long, ...)")
K_CUMSUM = ("void at::native::tensor_kernel_scan_innermost_dim<long, std::plus<long>>"
            "(long*, long const*, unsigned int, unsigned int, unsigned int, long, std::plus<long>)")
K_ARANGE = ("void at::native::(anonymous namespace)::elementwise_kernel_with_index<int, at::native::"
            "arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::"
            "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>(int, ...)")
K_TRIU = ("void at::native::triu_tril_kernel<c10::Half, int, true, 4, true>(at::cuda::detail::TensorInfo<"
          "c10::Half, int>, at::cuda::detail::TensorInfo<c10::Half const, int>, long, long, long, int)")
K_CAT_HALF = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::"
              "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>(...)")
K_CAT_LONG = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::"
              "OpaqueType<8u>, unsigned int, 2, 128, 1>(...)")
K_MASKED_FILL = _STRIDED.format(f="at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, "
                                "c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#4}::"
                                "operator()() const::{lambda(c10::Half, bool)#1}")
K_MASKED_FILL_LONG = _STRIDED.format(f="at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, "
                                     "c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#5}::"
                                     "operator()() const::{lambda(long, bool)#1}")
K_GEMM_LT_BIAS = ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_bias_f16_"
                  "execute_segment_k_off_kernel__5x_cublas")
K_GEMV = ("void gemv2T_kernel_val<int, int, __half, __half, __half, float, 128, 16, 4, 4, false, false, true, "
          "false, false, cublasGemvParamsEx<int, __half const*, __half const*, __half>, float>"
          "(cublasGemvParamsEx<int, __half const*, __half const*, __half>, float, float)")
K_BMM_PREFILL = {"tn": "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",
                 "nn": "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_nn"}
K_BMM_DECODE = {
    "tn": ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<__half const>, "
           "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>>"
           "(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<__half const>, "
           "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>, float>)"),
    "nn": ("void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<__half const>, "
           "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>>"
           "(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<__half const>, "
           "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half>, float>)"),
}

_FUNCTORS = {
    "mul_scalar_half": (("at::native::AUnaryFunctor<c10::Half, c10::Half, c10::Half, "
                        "at::native::binary_internal::MulFunctor<float>>"), 2),
    "add_half": ("at::native::CUDAFunctor_add<c10::Half>", 3),
    "relu_half": (("at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, "
                  "c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::"
                  "{lambda()#14}::operator()() const::{lambda(c10::Half)#1}"), 2),
    "fill_half": ("at::native::FillFunctor<c10::Half>", 1),
    "fill_long": ("at::native::FillFunctor<long>", 1),
    "fill_bool": ("at::native::FillFunctor<bool>", 1),
    "add_scalar_long": ("at::native::CUDAFunctorOnSelf_add<long>", 2),
    "rsub_scalar_long": ("at::native::CUDAFunctorOnOther_add<long>", 2),
    "mul_long": ("at::native::binary_internal::MulFunctor<long>", 3),
    "add_long": ("at::native::CUDAFunctor_add<long>", 3),
    "eq_scalar_long": (("at::native::AUnaryFunctor<long, long, bool, at::native::(anonymous namespace)::"
                       "CompareEqFunctor<long>>"), 2),
    "eq_scalar_half": (("at::native::AUnaryFunctor<c10::Half, c10::Half, bool, at::native::(anonymous namespace)::"
                       "CompareEqFunctor<c10::Half>>"), 2),
    "or_bool": ("at::native::BitwiseOrFunctor<bool>", 3),
    "and_bool": ("at::native::BitwiseAndFunctor<bool>", 3),
    "not_bool": ("at::native::bitwise_not_kernel_cuda(at::TensorIteratorBase&)::{lambda(bool)#1}", 2),
}
_STRIDED_FUNCTORS = {
    "copy_half": _COPY_F.format(i=7, t="c10::Half"),
    "copy_long": _COPY_F.format(i=4, t="long"),
    "gt_long": "at::native::(anonymous namespace)::CompareFunctor<long>",
    "mul_half_bool": "at::native::binary_internal::MulFunctor<float>",
    "add_half_long": "at::native::CUDAFunctor_add<c10::Half>",
    "add_half": "at::native::CUDAFunctor_add<c10::Half>",
    "eq_long_tensor": "at::native::(anonymous namespace)::CompareEqFunctor<long>",
}


@dataclass
class Kernel:
    """One launch before timing: what it is and the work it does."""

    name: str
    op: str
    dtype: str
    cls: str  # duration class: elementwise | reduction | gemm
    flops: float
    bytes: float
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int
    smem: int
    host_ns: float  # host time since the previous launch call
    tensor: bool = False
    gemm: tuple[int, int, int, int] = (-1, -1, -1, -1)  # batch, m, n, k
    sync_after: int = 0


@dataclass
class StepBuilder:
    """Collects the kernels of one generation step in launch order."""

    kernels: list[Kernel] = field(default_factory=list)
    pending_py_ns: float = 0.0

    def python(self, ns: float) -> None:
        """Host time spent in Python without a launch; charged to the next launch."""
        self.pending_py_ns += ns

    def add(self, k: Kernel) -> Kernel:
        k.host_ns += self.pending_py_ns
        self.pending_py_ns = 0.0
        self.kernels.append(k)
        return k

    # ---- kernel families -----------------------------------------------------------------
    def elementwise(self, functor: str, numel: int, elem_bytes: int, *, op: str = "elementwise",
                    dtype: str = "fp16", flops_per_elem: float = 1.0, intra: bool = False) -> Kernel:
        """A contiguous (vectorised) TensorIterator kernel over ``numel`` outputs.

        ``elem_bytes`` is the bytes read + written per output element.
        """
        f, arity = _FUNCTORS[functor]
        return self.add(Kernel(
            name=_VEC.format(f=f, a=arity), op=op, dtype=dtype, cls="elementwise",
            flops=flops_per_elem * numel, bytes=float(elem_bytes * numel),
            grid=(max(1, math.ceil(numel / 512)), 1, 1), block=(128, 1, 1), regs=22, smem=0,
            host_ns=HOST_INTRA_OP_NS if intra else HOST_OP_NS))

    def strided(self, functor: str, numel: int, elem_bytes: int, *, op: str = "elementwise",
                dtype: str = "fp16", flops_per_elem: float = 0.0, intra: bool = False,
                name: str | None = None) -> Kernel:
        """A broadcasting / non-contiguous TensorIterator kernel (offset calculators)."""
        kname = name or _STRIDED.format(f=_STRIDED_FUNCTORS[functor])
        return self.add(Kernel(
            name=kname, op=op, dtype=dtype, cls="elementwise",
            flops=flops_per_elem * numel, bytes=float(elem_bytes * numel),
            grid=(max(1, math.ceil(numel / 512)), 1, 1), block=(128, 1, 1), regs=30, smem=0,
            host_ns=HOST_INTRA_OP_NS if intra else HOST_OP_NS))

    def special(self, name: str, op: str, dtype: str, cls: str, flops: float, nbytes: float,
                grid: tuple[int, int, int], block: tuple[int, int, int], regs: int, smem: int = 0,
                intra: bool = False) -> Kernel:
        return self.add(Kernel(name=name, op=op, dtype=dtype, cls=cls, flops=flops, bytes=nbytes,
                               grid=grid, block=block, regs=regs, smem=smem,
                               host_ns=HOST_INTRA_OP_NS if intra else HOST_OP_NS))

    def linear(self, m: int, n: int, k: int, *, bias: bool) -> None:
        """``nn.Linear`` on ``m`` tokens: ``out[m, n] = x[m, k] @ W[n, k]^T (+ b)``.

        PyTorch's addmm uses the cublasLt bias epilogue (one kernel) only when
        every GEMM dimension is above 1; with ``m == 1`` (decode) it copies the
        broadcast bias into the output and runs a cuBLAS GEMM with beta=1,
        which cuBLAS serves with a GEMV kernel. Bias-free linears (lm_head)
        go through ``mm``.
        """
        flops = 2.0 * m * n * k
        nbytes = float(FP16 * (m * k + n * k + m * n) + (FP16 * n if bias else 0))
        gemm = (1, m, n, k)
        if m > 1:
            self.add(Kernel(
                name=K_GEMM_LT_BIAS if bias else K_GEMM_LT_BIAS.replace("_bias_f16", ""),
                op="linear", dtype="fp16", cls="gemm", flops=flops, bytes=nbytes,
                grid=(math.ceil(n / 64), math.ceil(m / 64), 1), block=(256, 1, 1), regs=168,
                smem=82432, host_ns=HOST_GEMM_OP_NS, tensor=True, gemm=gemm))
            return
        first_ns = HOST_GEMM_OP_NS
        if bias:
            self.strided("copy_half", m * n, 2 * FP16, op="copy", dtype="fp16")
            self.kernels[-1].host_ns += HOST_GEMM_OP_NS - HOST_OP_NS
            first_ns = HOST_INTRA_OP_NS
        self.add(Kernel(
            name=K_GEMV, op="linear", dtype="fp16", cls="gemm", flops=flops, bytes=nbytes,
            grid=(math.ceil(n / 16), 1, 1), block=(128, 1, 1), regs=40, smem=0,
            host_ns=first_ns, tensor=False, gemm=gemm))

    def bmm(self, kind: str, batch: int, m: int, n: int, k: int) -> None:
        """``torch.matmul`` of 4-D attention tensors, folded to one cuBLAS strided-batched GEMM."""
        flops = 2.0 * batch * m * n * k
        nbytes = float(FP16 * batch * (m * k + k * n + m * n))
        if m > 1:
            self.add(Kernel(
                name=K_BMM_PREFILL[kind], op="bmm", dtype="fp16", cls="gemm", flops=flops, bytes=nbytes,
                grid=(math.ceil(n / 64), math.ceil(m / 64), batch), block=(128, 1, 1), regs=126,
                smem=73728, host_ns=HOST_GEMM_OP_NS, tensor=True, gemm=(batch, m, n, k)))
        else:
            self.add(Kernel(
                name=K_BMM_DECODE[kind], op="bmm", dtype="fp16", cls="gemm", flops=flops, bytes=nbytes,
                grid=(math.ceil(n / 16), 1, batch), block=(128 if kind == "tn" else 256, 1, 1),
                regs=56, smem=0, host_ns=HOST_GEMM_OP_NS, tensor=False, gemm=(batch, m, n, k)))

    def layer_norm(self, rows: int) -> None:
        self.special(K_LAYER_NORM, "layernorm", "fp16", "reduction", 8.0 * rows * HIDDEN,
                     float(rows * HIDDEN * 2 * FP16 + 2 * HIDDEN * FP16 + rows * 2 * FP32),
                     (rows, 1, 1), (32, 4, 1), 34)

    def reduce(self, name: str, numel: int, in_bytes: int, out_bytes: int, dtype: str) -> Kernel:
        return self.special(name, "reduce", dtype, "reduction", float(numel),
                            float(numel * in_bytes + out_bytes), (max(1, math.ceil(numel / 4096)), 1, 1),
                            (32, 16, 1), 32, smem=16)

    def cat(self, name: str, out_numel: int, elem: int, dtype: str) -> None:
        self.special(name, "cat", dtype, "elementwise", 0.0, float(2 * out_numel * elem),
                     (max(1, math.ceil(out_numel / 512)), 2, 1), (128, 1, 1), 32)


def generate_steps(builder_steps: list[StepBuilder]) -> list[tuple[str, int, int]]:
    """Fill one StepBuilder per step; returns (kind, tokens, context) per step."""
    meta: list[tuple[str, int, int]] = []
    for step in range(NEW_TOKENS):
        b = StepBuilder()
        tokens = PROMPT_TOKENS if step == 0 else 1
        context = PROMPT_TOKENS + step
        past = context - tokens
        kind = "prefill" if step == 0 else "decode"
        if step == 0:
            # generate() setup: unfinished_sequences = ones(B); cache_position = ones_like(ids).cumsum(0) - 1
            b.python(HOST_SETUP_NS)
            b.elementwise("fill_long", BATCH, I64, op="fill", dtype="", flops_per_elem=0)
            b.elementwise("fill_long", PROMPT_TOKENS, I64, op="fill", dtype="", flops_per_elem=0)
            b.special(K_CUMSUM, "scan", "", "reduction", PROMPT_TOKENS, 2.0 * PROMPT_TOKENS * I64,
                      (1, 1, 1), (16, 32, 1), 32)
            b.elementwise("add_scalar_long", PROMPT_TOKENS, 2 * I64, dtype="")
        b.python(HOST_STEP_PY_NS)
        # ---- prepare_inputs_for_generation -------------------------------------------------
        if step > 0:  # input_ids[:, cache_position]: only the newest token
            b.special(K_INDEX, "index", "", "elementwise", 0.0, 3.0 * I64, (1, 1, 1), (128, 1, 1), 24)
        # position_ids = attention_mask.long().cumsum(-1) - 1; masked_fill_(attention_mask == 0, 1)
        b.special(K_CUMSUM, "scan", "", "reduction", context, 2.0 * context * I64, (1, 1, 1), (16, 32, 1), 32)
        b.elementwise("add_scalar_long", context, 2 * I64, dtype="")
        b.elementwise("eq_scalar_long", context, I64 + BOOL, op="compare", dtype="")
        b.strided("copy_long", context, I64 + BOOL + I64, op="masked_fill", dtype="",
                  name=K_MASKED_FILL_LONG)
        # position_ids[:, -tokens:].clone(memory_format=contiguous)
        b.strided("copy_long", tokens, 2 * I64, op="copy", dtype="")
        # ---- OPTForCausalLM.forward -> OPTDecoder.forward -----------------------------------
        b.python(HOST_FORWARD_PY_NS)
        b.special(K_EMBED, "embedding", "fp16", "elementwise", 0.0,
                  float(tokens * HIDDEN * 2 * FP16 + tokens * I64), (min(tokens, 16), 1, 1), (128, 1, 1), 28)
        # _update_causal_mask -> _prepare_4d_causal_attention_mask_with_cache_position (T x S fp16)
        ts = tokens * context
        b.elementwise("fill_half", ts, FP16, op="fill", flops_per_elem=0)
        if tokens > 1:
            b.special(K_TRIU, "triu", "fp16", "elementwise", 0.0, 2.0 * ts * FP16,
                      (max(1, math.ceil(ts / 512)), 1, 1), (128, 1, 1), 26)
        b.special(K_ARANGE, "arange", "", "elementwise", 0.0, float(context * I64), (1, 1, 1), (128, 1, 1), 16)
        b.strided("gt_long", ts, 2 * I64 + BOOL, op="compare", dtype="")
        b.strided("mul_half_bool", ts, 2 * FP16 + BOOL)
        b.strided("copy_half", ts, 2 * FP16, op="copy")  # expand(...).clone()
        b.strided("add_half_long", ts, 2 * FP16 + I64)  # causal_mask + attention_mask[:, None, None, :]
        b.elementwise("eq_scalar_half", ts, FP16 + BOOL, op="compare")
        b.strided("copy_half", ts, 2 * FP16, op="copy")  # masked_fill (out of place) clones first
        b.strided("copy_half", ts, FP16 + BOOL + FP16, op="masked_fill", name=K_MASKED_FILL)
        b.strided("copy_half", ts, 2 * FP16, op="copy")  # causal_mask[..., :S] = ...
        # positions: embed_positions(position_ids + 2); hidden = inputs_embeds + pos_embeds
        b.elementwise("add_scalar_long", tokens, 2 * I64, dtype="")
        b.special(K_EMBED, "embedding", "fp16", "elementwise", 0.0,
                  float(tokens * HIDDEN * 2 * FP16 + tokens * I64), (min(tokens, 16), 1, 1), (128, 1, 1), 28)
        b.elementwise("add_half", tokens * HIDDEN, 3 * FP16)
        for _layer in range(LAYERS):
            b.python(HOST_LAYER_PY_NS)
            b.layer_norm(tokens)  # self_attn_layer_norm (pre-LN)
            b.linear(tokens, HIDDEN, HIDDEN, bias=True)  # q_proj
            b.elementwise("mul_scalar_half", tokens * HIDDEN, 2 * FP16)  # * self.scaling
            b.linear(tokens, HIDDEN, HIDDEN, bias=True)  # k_proj
            b.linear(tokens, HIDDEN, HIDDEN, bias=True)  # v_proj
            if past > 0:  # DynamicCache.update: torch.cat([cache, new], dim=-2) for keys, values
                for _kv in range(2):
                    b.cat(K_CAT_HALF, HEADS * context * HEAD_DIM, FP16, "fp16")
            b.bmm("tn", HEADS, tokens, context, HEAD_DIM)  # matmul(q, k^T)
            b.elementwise("mul_scalar_half", HEADS * ts, 2 * FP16)  # * scaling (1.0, still a kernel)
            b.strided("add_half", HEADS * ts, 3 * FP16)  # + causal_mask (broadcast over heads)
            b.special(K_SOFTMAX.format(l=max(0, math.ceil(math.log2(context)))), "softmax", "fp32",
                      "reduction", 5.0 * HEADS * ts, float(HEADS * ts * (FP16 + FP32)),
                      (max(1, math.ceil(HEADS * tokens / 8)), 1, 1), (32, 4, 1), 40)
            b.special(_CAST.format(i=8, t="float"), "cast", "fp16", "elementwise", 0.0,
                      float(HEADS * ts * (FP32 + FP16)), (max(1, math.ceil(HEADS * ts / 512)), 1, 1),
                      (128, 1, 1), 20)  # .to(query.dtype)
            b.bmm("nn", HEADS, tokens, HEAD_DIM, context)  # matmul(probs, v)
            if tokens > 1:  # transpose(1, 2).contiguous(); a no-op view when T == 1
                b.strided("copy_half", tokens * HIDDEN, 2 * FP16, op="copy")
            b.linear(tokens, HIDDEN, HIDDEN, bias=True)  # out_proj
            b.elementwise("add_half", tokens * HIDDEN, 3 * FP16)  # residual
            b.layer_norm(tokens)  # final_layer_norm of the layer
            b.linear(tokens, FFN, HIDDEN, bias=True)  # fc1
            b.elementwise("relu_half", tokens * FFN, 2 * FP16)
            b.linear(tokens, HIDDEN, FFN, bias=True)  # fc2
            b.elementwise("add_half", tokens * HIDDEN, 3 * FP16)  # residual
        b.layer_norm(tokens)  # decoder.final_layer_norm
        b.python(HOST_LAYER_PY_NS)
        b.linear(1, VOCAB, HIDDEN, bias=False)  # lm_head on hidden[:, -1:, :] (logits_to_keep=1)
        # ---- generate() greedy bookkeeping -----------------------------------------------------
        b.python(HOST_LAYER_PY_NS)
        b.special(_CAST.format(i=7, t="c10::Half"), "cast", "fp32", "elementwise", 0.0,
                  float(VOCAB * (FP16 + FP32)), (math.ceil(VOCAB / 512), 1, 1), (128, 1, 1), 20)
        b.reduce(_REDUCE.format(t="float", ops="at::native::ArgMaxOps<float>", o="long"),
                 VOCAB, FP32, I64, "fp32")
        b.kernels[-1].op = "argmax"
        # next_tokens * unfinished + pad_token_id * (1 - unfinished)
        b.elementwise("mul_long", BATCH, 3 * I64, dtype="")
        b.elementwise("rsub_scalar_long", BATCH, 2 * I64, dtype="")
        b.elementwise("add_scalar_long", BATCH, 2 * I64, dtype="")
        b.kernels[-1].name = _VEC.format(f="at::native::AUnaryFunctor<long, long, long, "
                                         "at::native::binary_internal::MulFunctor<long>>", a=2)
        b.elementwise("add_long", BATCH, 3 * I64, dtype="")
        b.cat(K_CAT_LONG, context + 1, I64, "")  # input_ids = cat([input_ids, next_tokens[:, None]])
        b.elementwise("fill_long", BATCH, I64, op="fill", dtype="", flops_per_elem=0)  # new_ones
        b.cat(K_CAT_LONG, context + 1, I64, "")  # attention_mask = cat([mask, ones])
        b.elementwise("add_scalar_long", 1, 2 * I64, dtype="")  # cache_position[-1:] + 1
        # stopping criteria: full(False) | MaxLength(full(is_done)) | EosToken(isin(ids[:, -1], eos))
        b.elementwise("fill_bool", BATCH, BOOL, op="fill", dtype="", flops_per_elem=0)
        b.elementwise("fill_bool", BATCH, BOOL, op="fill", dtype="", flops_per_elem=0)
        b.elementwise("or_bool", BATCH, 3 * BOOL, dtype="")
        b.strided("eq_long_tensor", BATCH, 2 * I64 + BOOL, op="compare", dtype="")
        b.reduce(_REDUCE.format(t="bool", ops="at::native::func_wrapper_t<bool, at::native::or_kernel_cuda"
                                "(at::TensorIterator&)::{lambda(bool, bool)#1}>", o="bool"), 1, BOOL, BOOL, "")
        b.elementwise("or_bool", BATCH, 3 * BOOL, dtype="")
        b.elementwise("not_bool", BATCH, 2 * BOOL, dtype="")
        b.elementwise("and_bool", BATCH, 3 * BOOL, dtype="")
        # this_peer_finished = unfinished_sequences.max() == 0; the while-condition calls bool()
        b.reduce(_REDUCE.format(t="long", ops="at::native::MaxOps<long>", o="long"), BATCH, I64, I64, "")
        b.elementwise("eq_scalar_long", 1, I64 + BOOL, op="compare", dtype="")
        b.kernels[-1].sync_after = 1
        builder_steps.append(b)
        meta.append((kind, tokens, context))
    return meta


def duration_ns(k: Kernel) -> float:
    """First-principles device time on the source GPU: fixed cost + max(compute, memory)."""
    peak = TENSOR_FP16_PEAK * TENSOR_EFFICIENCY if k.tensor else SIMT_FP32_PEAK * SIMT_EFFICIENCY
    t_compute = k.flops / peak
    t_memory = k.bytes / (DRAM_BW * DRAM_EFFICIENCY)
    return FIXED_NS[k.cls] + max(t_compute, t_memory) * 1e9


def build_table() -> KernelTable:
    """The full synthetic timeline as a KernelTable (times on one stream, in ns)."""
    steps: list[StepBuilder] = []
    meta = generate_steps(steps)
    rows: list[dict[str, Any]] = []
    host = 0.0
    gpu_free = 0.0
    kid = 0
    for step, (b, (kind, tokens, context)) in enumerate(zip(steps, meta, strict=True)):
        for k in b.kernels:
            kid += 1
            host += k.host_ns
            launch = round(host)
            dur = round(duration_ns(k))
            start = max(launch, gpu_free)
            end = start + dur
            gpu_free = end
            if k.sync_after:
                host = max(host, end) + SYNC_RETURN_NS
            batch, m, n, kk = k.gemm
            rows.append({
                "name": k.name, "kernel_id": kid,
                "grid_x": k.grid[0], "grid_y": k.grid[1], "grid_z": k.grid[2],
                "block_x": k.block[0], "block_y": k.block[1], "block_z": k.block[2],
                "regs": k.regs, "smem_bytes": k.smem, "sm_version": SM_VERSION, "stream": STREAM,
                "host_launch_ns": float(launch), "start_ns": float(start), "duration_ns": float(dur),
                "sync_after": k.sync_after, "step": step, "step_kind": kind, "step_tokens": tokens * BATCH,
                "step_context": context, "op": k.op, "dtype": k.dtype, "flops": float(round(k.flops)),
                "bytes": float(round(k.bytes)), "batch": batch, "m": m, "n": n, "k": kk,
            })
    return KernelTable.from_rows(rows)


def render_csv(table: KernelTable) -> str:
    """The timeline CSV, formatted by this script (its bytes are pinned by the manifest's
    sha256): unknown values empty, integral floats without a fraction, others as repr."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    cols = [table[c] for c in CSV_COLUMNS]
    for i in range(len(table)):
        w.writerow([_cell(col[i]) for col in cols])
    return buf.getvalue()


def _cell(v: Any) -> str:
    if isinstance(v, float | np.floating):
        if math.isnan(v):
            return ""
        return repr(float(v)) if not float(v).is_integer() else str(int(v))
    if isinstance(v, int | np.integer) and v == -1:
        return ""
    return str(v)


def summarise(table: KernelTable) -> dict[str, Any]:
    """Derived figures of the synthetic timeline (not measurements)."""
    import numpy as np

    step = table["step"]
    start = table["start_ns"]
    end = start + table["duration_ns"]
    per_step = []
    prev_end = 0.0
    for s in range(int(step.max()) + 1):
        sel = step == s
        s_end = float(end[sel].max())
        per_step.append(s_end - prev_end)
        prev_end = s_end
    per_step_counts = np.bincount(step)
    return {
        "kernels_total": len(table),
        "kernels_prefill_step": int(per_step_counts[0]),
        "kernels_per_decode_step": sorted({int(c) for c in per_step_counts[1:]}),
        "steps": int(step.max()) + 1,
        "e2e_ns": float(end.max()),
        "gpu_busy_ns": float(table["duration_ns"].sum()),
        "prefill_step_ns": per_step[0],
        "decode_step_ns_mean": float(np.mean(per_step[1:])),
    }


def manifest(table: KernelTable, csv_text: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "provenance": "synthetic",
        "label": "synthetic",
        "sample": "opt125m-h100-e2e",
        "description": ("Synthetic replica: kernel timeline of facebook/opt-125m eager greedy generation "
                        "built from the model architecture and first-principles H100 estimates; "
                        "not a measurement and not fitted to the recorded reference."),
        "generator": "samples/opt125m-h100-e2e/generate_timeline.py",
        "timeline": CSV_NAME,
        "timeline_sha256": hashlib.sha256(csv_text.encode()).hexdigest(),
        "source_gpu": SOURCE_GPU,
        "workload": {
            "model": "facebook/opt-125m", "framework": "PyTorch eager + Hugging Face transformers generate()",
            "attn_implementation": "eager", "cache": "DynamicCache (torch.cat per layer)",
            "dtype": "fp16", "decoding": "greedy", "batch": BATCH, "prompt": PROMPT,
            "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS,
            "hidden": HIDDEN, "layers": LAYERS, "heads": HEADS, "head_dim": HEAD_DIM, "ffn": FFN,
            "vocab": VOCAB, "max_positions": MAX_POSITIONS, "position_offset": POS_OFFSET,
            "layer_norm": "pre-LN + final LayerNorm", "activation": "relu",
            "lm_head": "tied to embed_tokens, no bias",
        },
        "steps": {
            "prefill": {"step": 0, "tokens": PROMPT_TOKENS, "context": PROMPT_TOKENS},
            "decode": {"steps": [1, NEW_TOKENS - 1], "tokens": 1,
                       "contexts": [PROMPT_TOKENS + 1, PROMPT_TOKENS + NEW_TOKENS - 1]},
            "note": ("step 0 prefills the 6 prompt tokens and yields new token 1; decode step i (1..31) "
                     "runs at context 6+i and yields token i+1: 32 forward passes, 32 new tokens"),
        },
        "assumptions": {
            "duration": "fixed[class] + max(flops / (peak * eff), bytes / (dram_bw * eff))",
            "tensor_fp16_peak_flops": TENSOR_FP16_PEAK, "tensor_efficiency": TENSOR_EFFICIENCY,
            "simt_fp32_peak_flops": SIMT_FP32_PEAK, "simt_efficiency": SIMT_EFFICIENCY,
            "dram_bw_bytes_per_s": DRAM_BW, "dram_efficiency": DRAM_EFFICIENCY,
            "fixed_ns": FIXED_NS,
            "host_op_ns": HOST_OP_NS, "host_gemm_op_ns": HOST_GEMM_OP_NS,
            "host_intra_op_ns": HOST_INTRA_OP_NS, "host_layer_python_ns": HOST_LAYER_PY_NS,
            "host_forward_python_ns": HOST_FORWARD_PY_NS, "host_step_python_ns": HOST_STEP_PY_NS,
            "host_generate_setup_ns": HOST_SETUP_NS, "sync_return_ns": SYNC_RETURN_NS,
            "stream": STREAM, "device_start": "max(host launch, previous kernel end) on one stream",
            "sync": "host waits for the device after the last kernel of each step (bool(this_peer_finished))",
        },
        "derived": summarise(table),
    }


def render() -> dict[str, bytes]:
    """The files of the synthetic folder, by name, as bytes."""
    table = build_table()
    csv_text = render_csv(table)
    man = json.dumps(manifest(table, csv_text), indent=2, sort_keys=True) + "\n"
    # gzip with a fixed mtime: byte-identical output on every run (the CSV is ~4.5 MB as text)
    packed = gzip.compress(csv_text.encode(), compresslevel=9, mtime=0)
    return {CSV_NAME: packed, MANIFEST_NAME: man.encode()}


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in render().items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def check(out_dir: Path) -> list[str]:
    """Regenerate into a temporary folder and list the files that differ from ``out_dir``."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = write(Path(tmp))
        drift = []
        for path in fresh:
            committed = out_dir / path.name
            if not committed.exists() or committed.read_bytes() != path.read_bytes():
                drift.append(str(committed))
        return drift


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default: synthetic/)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate to a temporary folder and compare; exit 1 if anything differs")
    args = parser.parse_args(argv)
    if args.check:
        drift = check(args.out)
        if drift:
            print("out of date (rerun generate_timeline.py): " + ", ".join(drift), file=sys.stderr)
            return 1
        print(f"up to date: {args.out}")
        return 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Op families and kernel-name hints (tile sizes, tensor-core vs SIMT paths), vectorised.

Names are parsed once per distinct name and broadcast back, so a table of a
million launches of a few hundred kernels costs a few hundred regex runs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cascade.llm.names import classify

#: Op families the models distinguish (index = code in ``family`` arrays).
FAMILIES: tuple[str, ...] = (
    "gemm", "attention", "norm", "softmax", "elementwise", "embedding", "reduce", "memcpy", "other",
)
GEMM, ATTENTION, NORM, SOFTMAX, ELEMENTWISE, EMBEDDING, REDUCE, MEMCPY, OTHER = range(len(FAMILIES))

_OP_WORDS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (NORM, ("layernorm", "layer_norm", "rmsnorm", "rms_norm", "groupnorm", "batchnorm", "norm")),
    (SOFTMAX, ("softmax",)),
    (EMBEDDING, ("embedding", "emb", "gather", "index_select")),
    (GEMM, ("linear", "matmul", "bmm", "gemm", "gemv", "mm", "addmm", "proj", "conv", "dense", "fc")),
    (ELEMENTWISE, ("elementwise", "add", "mul", "act", "gelu", "silu", "relu", "rope", "rotary",
                   "residual", "dropout", "cast", "scale", "bias", "tanh", "exp")),
    (REDUCE, ("reduce", "sum", "mean", "argmax", "topk", "sampling")),
    (MEMCPY, ("memcpy", "memset", "copy", "cat", "transpose", "contiguous")),
    (ATTENTION, ("attention", "attn", "sdpa", "flash", "fmha", "mha", "paged_attention")),
)
_NAME_RULES: tuple[tuple[int, re.Pattern[str]], ...] = (
    (ATTENTION, re.compile(r"flash|fmha|attention|mha_|sdpa", re.IGNORECASE)),
    (NORM, re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|"
                      r"(?<![a-z])bn_(?:fw|bw)|cudnn::bn_|welford", re.IGNORECASE)),
    (SOFTMAX, re.compile(r"softmax", re.IGNORECASE)),
    (GEMM, re.compile(r"gemm|gemv|xmma|wgmma|cutlass|hmma|s16816|h16816|h884|s884|h1688|s1688|"
                      r"sgemm|dgemm|matmul|cublas|implicit_gemm|conv|scudnn|hcudnn|cudnn_|"
                      r"winograd|fprop|dgrad|wgrad|fft2d|fft_r2c|cgemm", re.IGNORECASE)),
    (EMBEDDING, re.compile(r"embedding|index_?select|gather|indexselect", re.IGNORECASE)),
    (REDUCE, re.compile(r"reduce|argmax|topk|nll_loss|cross_entropy|sort|scan|cumsum|"
                        r"splitkreduce", re.IGNORECASE)),
    (MEMCPY, re.compile(r"memcpy|memset|copy_kernel|cat_array|catarray|transpose|nchwtonhwc|"
                        r"nhwctonchw|permute|contiguous", re.IGNORECASE)),
    (ELEMENTWISE, re.compile(r"elementwise|vectorized|unrolled|silu|gelu|relu|act_and_mul|rotary|"
                             r"add_kernel|mul_kernel|fill_kernel|pool|dropout|upsample|"
                             r"adam|sgd_|momentum|foreach|where_kernel|index_put|scatter",
                             re.IGNORECASE)),
)
_TENSOR_NAME = re.compile(
    r"h884|s884|h1688|s1688|i8816|h16816|s16816|bf16816|hmma|imma|wgmma|xmma|tensorop|"
    r"gemm_f16|gemm_bf16|f16f16|bf16bf16|e4m3|e5m2|_tf32|tf32_|fp16_s|flash|fmha|gmma", re.IGNORECASE)
#: SIMT names win over tensor words: ``sm80_xmma_gemm_f32f32_..._ffma_...`` is an FP32 FMA
#: (CUDA-core) kernel from the xmma generator, not a tensor-core one.
_SIMT_NAME = re.compile(r"sgemm|dgemm|gemv|gemmSN|gemmk1|splitKreduce|_simt_|ffma|hfma", re.IGNORECASE)
_DTYPE_NAME: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp4", re.compile(r"e2m1|nvfp4|mxfp4|_fp4", re.IGNORECASE)),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|_f8|qgmma", re.IGNORECASE)),
    ("int8", re.compile(r"i8816|imma|int8|_i8|s8s8|igemm", re.IGNORECASE)),
    ("bf16", re.compile(r"bf16|bfloat16|bf16816", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32", re.IGNORECASE)),
    ("fp64", re.compile(r"dgemm|dmma|_f64|fp64|double", re.IGNORECASE)),
    ("fp16", re.compile(r"h884|h1688|h16816|s884|s1688|s16816|hgemm|hcudnn|f16|fp16|half|__half|"
                        r"hmma", re.IGNORECASE)),
    ("fp32", re.compile(r"sgemm|scudnn|ffma|_f32f32_f32|implicit_convolve_sgemm|float",
                        re.IGNORECASE)),
)
#: dtypes of LLM kernels (:func:`cascade.llm.names.classify`) that run on tensor cores.
_LLM_TENSOR = ("bf16", "fp16", "fp8", "fp8_block", "fp4", "int4")
_TILE_SIZE = re.compile(r"tilesize(\d+)x(\d+)(?:x(\d+))?", re.IGNORECASE)
_TILE_PAIR = re.compile(r"(?<![0-9a-z])(\d{2,3})x(\d{2,3})(?:x(\d{1,3}))?(?![0-9])", re.IGNORECASE)
_SLICED = re.compile(r"sliced(\d+)x(\d+)", re.IGNORECASE)
_TILE_OK = {16, 32, 48, 64, 96, 128, 160, 192, 224, 256}
_DTYPE_BYTES = {"fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0,
                "fp8_block": 1.0, "fp4": 0.5, "mxfp4": 0.5, "int4": 0.5}


def family_of(op: str, name: str) -> int:
    """Family code of one kernel from its ``op`` annotation, else its name."""
    text = op.strip().lower()
    if text:
        tokens = set(re.split(r"[^a-z0-9]+", text))
        for code, words in _OP_WORDS:
            for w in words:
                if w in tokens or (len(w) > 4 and w in text):
                    return code
    for code, pattern in _NAME_RULES:
        if pattern.search(name):
            return code
    kind = classify(name).kind  # today's LLM kernels the rules above do not name
    if kind in ("gemm", "moe"):
        return GEMM
    if kind == "attention":
        return ATTENTION
    return OTHER


def tile_of(name: str) -> tuple[int, int]:
    """GEMM tile (first, second) named in a cuBLAS/CUTLASS kernel name, (0, 0) if none.

    cuBLAS names (``ampere_sgemm_128x64_tn``, ``..._256x128_ldg8...``) give the
    column-major C tile: the first figure covers the row-major output's
    columns (``n``), the second its rows (``m``). ``tilesize128x256x64`` is read
    the same way.
    """
    m = _TILE_SIZE.search(name)
    if m:
        return int(m.group(1)), int(m.group(2))
    for m in _TILE_PAIR.finditer(name):
        a, b = int(m.group(1)), int(m.group(2))
        if a in _TILE_OK and b in _TILE_OK:
            start = m.start()
            if name[max(0, start - 7):start].lower().endswith(("stages_", "warps_", "cluster")):
                continue
            return a, b
    return 0, 0


def k_split_of(name: str) -> int:
    """Warps sharing one tile's K loop (``sliced1x4`` -> 4), 1 if the name says none."""
    m = _SLICED.search(name)
    return int(m.group(1)) * int(m.group(2)) if m else 1


def tensor_path_of(name: str) -> int:
    """1 if the name says tensor cores, 0 if it says SIMT, -1 if it says neither."""
    if _SIMT_NAME.search(name):
        return 0
    if _TENSOR_NAME.search(name):
        return 1
    llm = classify(name)
    if llm.kind in ("gemm", "moe", "attention") and llm.dtype in _LLM_TENSOR:
        return 1
    return -1


#: An Ampere-or-later kernel's ``s1688`` MMA (m16n8k8, FP32 accumulation) takes TF32 operands:
#: that generation's FP16 / BF16 MMA is m16n8k16 (``s16816``). CUTLASS's
#: ``cutlass_80_tensorop_s1688gemm_..._align4`` is what PyTorch runs for an FP32 matmul or
#: convolution with TF32 allowed; on Turing the same letters are FP16 (``turing_s1688gemm``).
_S1688_TF32 = re.compile(r"(?:_(?:8\d|9\d|1\d\d)_|sm_?(?:8\d|9\d|1\d\d)|ampere|hopper|ada_|blackwell)"
                         r"\w*s1688", re.IGNORECASE)
_HALF_WORD = re.compile(r"f16|fp16|half|h1688|hgemm", re.IGNORECASE)


def dtype_of_name(name: str) -> str:
    """Math dtype a cuBLAS / cuDNN / CUTLASS / xmma kernel name says ('' if it says none):
    ``h884``/``s1688``/``f16`` -> fp16 (Volta/Turing ``s884``/``s1688`` are fp16 inputs with
    fp32 accumulation; an Ampere-or-later ``s1688`` is TF32, :data:`_S1688_TF32`), ``bf16``,
    ``tf32``, ``e4m3``/``e5m2`` -> fp8, ``i8816``/``imma`` -> int8, ``sgemm``/``scudnn`` ->
    fp32, ``dgemm`` -> fp64."""
    if _S1688_TF32.search(name) and not _HALF_WORD.search(name) and "bf16" not in name.lower():
        return "tf32"
    for dtype, pattern in _DTYPE_NAME:
        if pattern.search(name):
            return dtype
    llm = classify(name).dtype
    return llm if llm in _LLM_TENSOR else ""


def factorize(values: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """(distinct values in first-seen order, int64 code per element) via one dict pass."""
    items = values.tolist()
    index: dict[Any, int] = dict.fromkeys(items, 0)
    for i, key in enumerate(index):
        index[key] = i
    codes = np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items))
    return list(index), codes


def _per_unique(values: np.ndarray, fn: Any) -> np.ndarray:
    uniq, codes = factorize(values)
    mapped = np.asarray([fn(str(u)) for u in uniq])
    return mapped[codes]


def families(op: np.ndarray, name: np.ndarray) -> np.ndarray:
    """Family codes (int8) for a table's ``op`` and ``name`` columns."""
    if len(op) == 0:
        return np.zeros(0, dtype=np.int8)
    op_u, op_c = factorize(op)
    name_u, name_c = factorize(name)
    pair_u, pair_c = factorize(op_c * len(name_u) + name_c)
    fam = np.asarray([family_of(str(op_u[p // len(name_u)]), str(name_u[p % len(name_u)])) for p in pair_u],
                     dtype=np.int8)
    return fam[pair_c]


def name_hints(name: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tile_first, tile_second, tensor_path, k_split) arrays for a ``name`` column."""
    n = len(name)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    hints = _per_unique(name, lambda s: (*tile_of(s), tensor_path_of(s), k_split_of(s)))
    hints = hints.reshape(n, 4).astype(np.int64)
    return hints[:, 0], hints[:, 1], hints[:, 2], hints[:, 3]


def name_dtypes(name: np.ndarray) -> np.ndarray:
    """:func:`dtype_of_name` of every row of a ``name`` column (object array)."""
    if len(name) == 0:
        return np.zeros(0, dtype=object)
    return _per_unique(name, dtype_of_name).astype(object)


#: Kernel classes for traces without shapes (:func:`work_class`).
COMPUTE_CLASS, MEMORY_CLASS, BLEND_CLASS = 0, 1, 2
_MEMORY_FAMILIES = (NORM, SOFTMAX, ELEMENTWISE, EMBEDDING, REDUCE, MEMCPY)


def work_class(family: np.ndarray) -> np.ndarray:
    """Per kernel: compute-class (GEMM, convolution and attention families), memory-class
    (norm, softmax, elementwise, embedding/index, reduction, copy) or blend (unknown)."""
    out = np.full(len(family), BLEND_CLASS, dtype=np.int8)
    out[(family == GEMM) | (family == ATTENTION)] = COMPUTE_CLASS
    out[np.isin(family, _MEMORY_FAMILIES)] = MEMORY_CLASS
    return out


def dtype_bytes(dtype: np.ndarray, default: float = 2.0) -> np.ndarray:
    """Bytes per element for a ``dtype`` column (unknown -> ``default``)."""
    if len(dtype) == 0:
        return np.zeros(0)
    return _per_unique(dtype, lambda d: _DTYPE_BYTES.get(d, default)).astype(np.float64)

"""Op families and kernel-name hints (tile sizes, tensor-core vs SIMT paths), vectorised.

Names are parsed once per distinct name and broadcast back, so a table of a
million launches of a few hundred kernels costs a few hundred regex runs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

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
    (NORM, re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm", re.IGNORECASE)),
    (SOFTMAX, re.compile(r"softmax", re.IGNORECASE)),
    (GEMM, re.compile(r"gemm|gemv|xmma|wgmma|cutlass|hmma|s16816|h16816|h884|s884|h1688|s1688|"
                      r"sgemm|dgemm|matmul|cublas|implicit_gemm|conv", re.IGNORECASE)),
    (EMBEDDING, re.compile(r"embedding|index_select|gather", re.IGNORECASE)),
    (REDUCE, re.compile(r"reduce|argmax|topk", re.IGNORECASE)),
    (MEMCPY, re.compile(r"memcpy|memset|copy_kernel|cat_array|transpose", re.IGNORECASE)),
    (ELEMENTWISE, re.compile(r"elementwise|vectorized|unrolled|silu|gelu|relu|act_and_mul|rotary|"
                             r"add_kernel|mul_kernel|fill_kernel", re.IGNORECASE)),
)
_TENSOR_NAME = re.compile(
    r"h884|s884|h1688|s1688|i8816|h16816|s16816|bf16816|hmma|imma|wgmma|xmma|tensorop|"
    r"gemm_f16|gemm_bf16|f16f16|bf16bf16|e4m3|e5m2|_tf32|tf32_|fp16_s|flash|fmha|gmma", re.IGNORECASE)
#: SIMT names win over tensor words: ``sm80_xmma_gemm_f32f32_..._ffma_...`` is an FP32 FMA
#: (CUDA-core) kernel from the xmma generator, not a tensor-core one.
_SIMT_NAME = re.compile(r"sgemm|dgemm|gemv|gemmSN|gemmk1|splitKreduce|_simt_|ffma|hfma", re.IGNORECASE)
_TILE_SIZE = re.compile(r"tilesize(\d+)x(\d+)(?:x(\d+))?", re.IGNORECASE)
_TILE_PAIR = re.compile(r"(?<![0-9a-z])(\d{2,3})x(\d{2,3})(?:x(\d{1,3}))?(?![0-9])", re.IGNORECASE)
_SLICED = re.compile(r"sliced(\d+)x(\d+)", re.IGNORECASE)
_TILE_OK = {16, 32, 48, 64, 96, 128, 160, 192, 224, 256}
_DTYPE_BYTES = {"fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0}


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
    return -1


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


def dtype_bytes(dtype: np.ndarray, default: float = 2.0) -> np.ndarray:
    """Bytes per element for a ``dtype`` column (unknown -> ``default``)."""
    if len(dtype) == 0:
        return np.zeros(0)
    return _per_unique(dtype, lambda d: _DTYPE_BYTES.get(d, default)).astype(np.float64)

"""Per-kernel work derived from a KernelTable: family, dtype, FLOPs, bytes, GEMM shape, hints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascade import opfamilies
from cascade.kerneltable import DTYPES, KernelTable

#: dtypes with tensor-core paths (on GPUs that have them).
TENSOR_DTYPES: tuple[str, ...] = ("fp16", "bf16", "tf32", "fp8", "int8", "fp8_block", "fp4", "mxfp4", "int4")


@dataclass(frozen=True, slots=True)
class Workload:
    """Columnar per-kernel work, all arrays of the table's length."""

    family: np.ndarray
    """Family code (see :data:`cascade.opfamilies.FAMILIES`)."""
    dtype: np.ndarray
    """Math dtype strings ('' -> treated as fp16 for tensor kernels, fp32 otherwise)."""
    dtype_code: np.ndarray
    """Index of ``dtype`` in :data:`cascade.kerneltable.DTYPES`."""
    tensor: np.ndarray
    """True where the kernel runs on tensor cores."""
    flops: np.ndarray
    """FLOPs (0 where unknown)."""
    bytes: np.ndarray
    """DRAM bytes (0 where unknown)."""
    batch: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    """GEMM shape (NaN where not a GEMM with known dims)."""
    tile_a: np.ndarray
    tile_b: np.ndarray
    """Tile named in the kernel name (0 where none): a covers n, b covers m."""
    blocks: np.ndarray
    """Grid size in blocks (NaN where unknown)."""
    threads: np.ndarray
    """Threads per block (NaN where unknown)."""
    regs: np.ndarray
    """Registers per thread (NaN where unknown)."""
    smem: np.ndarray
    """Shared memory per block, bytes (NaN where unknown)."""
    k_split: np.ndarray
    """Warps sharing a tile's K loop (``sliced1x4`` kernels: 4), else 1."""

    def __len__(self) -> int:
        return len(self.family)

    @property
    def is_gemm(self) -> np.ndarray:
        """GEMM-like kernels with known shape."""
        return (self.family == opfamilies.GEMM) & np.isfinite(self.m) & np.isfinite(self.n) & np.isfinite(self.k)


def _dims(table: KernelTable, col: str) -> np.ndarray:
    v = table[col].astype(np.float64)
    return np.where(v > 0, v, np.nan)


def workload_of(table: KernelTable) -> Workload:
    """Derive the work of every kernel (fills FLOPs/bytes from GEMM dims where missing)."""
    n = len(table)
    names = table["name"]
    fam = opfamilies.families(table["op"], names)
    tile_a, tile_b, path, k_split = opfamilies.name_hints(names)
    dtype = np.asarray(table["dtype"], dtype=object).copy()
    unknown = dtype == ""
    if unknown.any():  # what the kernel's name says (cuBLAS / cuDNN / CUTLASS / xmma)
        dtype[unknown] = opfamilies.name_dtypes(names[unknown])
        unknown = dtype == ""
    if unknown.any():
        dtype[unknown & (path == 1)] = "fp16"
        dtype[unknown & (path != 1)] = "fp32"
    # fp32 operands on a kernel the name puts on tensor cores run as TF32 (the only tensor
    # path for fp32 inputs): peak and efficiency are TF32's, not the SIMT FP32 ones.
    dtype[(dtype == "fp32") & (path == 1)] = "tf32"
    dt_u, dt_c = opfamilies.factorize(dtype)
    dtype_code = np.asarray([DTYPES.index(d) if d in DTYPES else DTYPES.index("fp32") for d in dt_u],
                            dtype=np.int8)[dt_c] if n else np.zeros(0, dtype=np.int8)
    is_tensor_dtype = np.isin(dtype_code, [DTYPES.index(d) for d in TENSOR_DTYPES])
    matmul_like = (fam == opfamilies.GEMM) | (fam == opfamilies.ATTENTION)
    tensor = np.where(path >= 0, path == 1, is_tensor_dtype & matmul_like)
    batch = _dims(table, "batch")
    batch = np.where(np.isnan(batch), 1.0, batch)
    m, nn, k = _dims(table, "m"), _dims(table, "n"), _dims(table, "k")
    esize = opfamilies.dtype_bytes(dtype, 2.0) if n else np.zeros(0)
    flops = table["flops"].astype(np.float64).copy()
    gemm_flops = 2.0 * batch * m * nn * k
    flops = np.where(np.isnan(flops) & np.isfinite(gemm_flops), gemm_flops, flops)
    flops = np.where(np.isnan(flops), 0.0, flops)
    nbytes = table["bytes"].astype(np.float64).copy()
    gemm_bytes = esize * batch * (m * k + k * nn + m * nn)
    nbytes = np.where(np.isnan(nbytes) & np.isfinite(gemm_bytes), gemm_bytes, nbytes)
    if table.has("footprint_lines"):
        nbytes = np.where(np.isnan(nbytes), table["footprint_lines"].astype(np.float64) * 128.0, nbytes)
    nbytes = np.where(np.isnan(nbytes), 0.0, nbytes)
    blocks = (table["grid_x"].astype(np.float64) * np.maximum(table["grid_y"], 1)
              * np.maximum(table["grid_z"], 1))
    blocks = np.where(table["grid_x"] > 0, blocks, np.nan)
    threads = (table["block_x"].astype(np.float64) * np.maximum(table["block_y"], 1)
               * np.maximum(table["block_z"], 1))
    threads = np.where(table["block_x"] > 0, threads, np.nan)
    regs = np.where(table["regs"] > 0, table["regs"].astype(np.float64), np.nan)
    smem = np.where(table["smem_bytes"] > 0, table["smem_bytes"].astype(np.float64), np.nan)
    return Workload(family=fam, dtype=dtype, dtype_code=dtype_code, tensor=tensor.astype(bool), flops=flops, bytes=nbytes,
                    batch=batch, m=m, n=nn, k=k, tile_a=tile_a.astype(np.float64),
                    tile_b=tile_b.astype(np.float64), blocks=blocks, threads=threads, regs=regs, smem=smem,
                    k_split=np.maximum(k_split, 1).astype(np.float64))

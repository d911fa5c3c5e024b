"""The columnar per-kernel table every part of Cascade shares.

One row per kernel launch, one numpy array per column. Timelines (measured
durations, host launch times, streams, steps), instruction-trace features
(from prepare) and model predictions all live in columns of this one shape,
so hot paths are vectorised and a bundle loads as a handful of arrays.

Unknown numeric values are NaN (floats) or -1 (integers); unknown strings are
"". The Cascade kernel-table CSV uses the column names below; every column
but ``name`` is optional on input; files are read and written by :mod:`cascade.tableio`.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

#: Header of the Cascade kernel-table CSV accepted by `cascade predict` (issue contract).
CSV_HEADER: tuple[str, ...] = (
    "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "regs",
    "smem_bytes", "stream", "duration_ns", "op", "dtype", "flops", "bytes", "batch",
    "m", "n", "k",
)

#: dtypes a kernel's math can be in (``dtype`` column).
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp64", "fp8_block", "fp4", "mxfp4",
                          "int4")

_STR = np.dtype(object)
_I64 = np.dtype(np.int64)
_F64 = np.dtype(np.float64)

#: Column name -> (numpy dtype, description). Order is the canonical order.
COLUMNS: dict[str, tuple[np.dtype[Any], str]] = {
    # identity and launch configuration
    "name": (_STR, "kernel (mangled or demangled) name"),
    "kernel_id": (_I64, "1-based kernel id in launch order (Accel-Sim kernel id)"),
    "grid_x": (_I64, "grid dimension x"),
    "grid_y": (_I64, "grid dimension y"),
    "grid_z": (_I64, "grid dimension z"),
    "block_x": (_I64, "block dimension x"),
    "block_y": (_I64, "block dimension y"),
    "block_z": (_I64, "block dimension z"),
    "regs": (_I64, "registers per thread"),
    "smem_bytes": (_I64, "shared memory per block, static + dynamic, bytes"),
    "sm_version": (_I64, "binary sm version (e.g. 80, 90)"),
    "stream": (_I64, "CUDA stream id"),
    # timeline (measured on the source GPU)
    "host_launch_ns": (_F64, "host time the launch call was made, ns since trace start"),
    "start_ns": (_F64, "measured device start, ns since trace start"),
    "duration_ns": (_F64, "measured device duration on the source GPU, ns"),
    "sync_after": (_I64, "1 if the host synchronises with the device after this kernel"),
    "step": (_I64, "step index (generation step) or -1"),
    "step_kind": (_STR, "'prefill', 'decode' or ''"),
    "step_tokens": (_I64, "tokens processed in this kernel's step (batch x new tokens)"),
    "step_context": (_I64, "context length (tokens already in KV cache + new) of the step"),
    "step_batch": (_I64, "sequences in this kernel's step (-1: 1 for prefill, tokens for decode)"),
    # op annotations
    "op": (_STR, "op name (linear, matmul, bmm, attention, layernorm, softmax, ...)"),
    "dtype": (_STR, "math dtype: fp32, tf32, fp16, bf16, fp8, int8, fp64"),
    "flops": (_F64, "floating-point operations of the kernel"),
    "bytes": (_F64, "bytes moved to/from device memory (unique footprint estimate)"),
    "batch": (_I64, "GEMM batch"),
    "m": (_I64, "GEMM M"),
    "n": (_I64, "GEMM N"),
    "k": (_I64, "GEMM K"),
    # today's LLM operators (:mod:`cascade.llm.work`): op = gemm | attention | moe | collective
    "impl": (_STR, "implementation (cublas, nvjet, cutlass, deepgemm, flashinfer, triton, marlin, fa2, fa3, "
                   "fa4, trtllm_gen, nccl, vllm_custom, multimem, ...)"),
    "phase": (_STR, "attention: 'prefill' (seq new tokens per sequence, causal) or 'decode' (one new token "
                    "attending to context cached ones)"),
    "seq": (_I64, "attention: new tokens per sequence"),
    "context": (_I64, "attention: tokens each sequence attends to (cached + new)"),
    "heads": (_I64, "attention: query heads on this GPU"),
    "kv_heads": (_I64, "attention: KV heads on this GPU (fewer than heads: GQA / MQA)"),
    "head_dim": (_I64, "attention: head dimension"),
    "window": (_I64, "attention: sliding window in tokens (0: full attention)"),
    "kv_dtype": (_STR, "attention: KV-cache dtype (bf16, fp8)"),
    "tokens": (_I64, "fused MoE: tokens entering the layer"),
    "hidden": (_I64, "fused MoE: hidden size"),
    "inter": (_I64, "fused MoE: the model's expert intermediate size (before the TP split)"),
    "experts": (_I64, "fused MoE: the model's experts (before the EP split)"),
    "topk": (_I64, "fused MoE: experts per token"),
    "tp": (_I64, "fused MoE: tensor-parallel split of each expert's intermediate size"),
    "ep": (_I64, "fused MoE: expert-parallel ranks (this GPU holds experts / ep)"),
    "distribution": (_STR, "fused MoE: expert load ('balanced', 'power_law_1.2', ...)"),
    "collective": (_STR, "collective: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv"),
    "ranks": (_I64, "collective: GPUs taking part"),
    "comm_bytes": (_F64, "collective: message size in bytes (the whole buffer, as nccl-tests counts it)"),
    "kernels": (_I64, "device kernels this row's time covers (an operator a harness timed as one "
                      "call: a lower bound of its launches); -1: one kernel"),
    # instruction-trace features (prepare); warp-instruction counts are totals over the kernel
    "warp_insts": (_F64, "warp instructions executed (including predicated-off)"),
    "insts_int": (_F64, "integer ALU warp instructions"),
    "insts_fp32": (_F64, "FP32 SIMT warp instructions"),
    "insts_fp64": (_F64, "FP64 warp instructions"),
    "insts_fp16": (_F64, "packed FP16 SIMT warp instructions (HADD2/HFMA2/...)"),
    "insts_sfu": (_F64, "special-function warp instructions (MUFU)"),
    "insts_tensor": (_F64, "tensor-core warp instructions (all kinds)"),
    "tensor_flops": (_F64, "tensor-core FLOPs implied by the MMA shapes"),
    "insts_ld_global": (_F64, "global loads (LDG, LD to global)"),
    "insts_st_global": (_F64, "global stores"),
    "insts_ld_shared": (_F64, "shared loads (LDS, LDSM)"),
    "insts_st_shared": (_F64, "shared stores"),
    "insts_local": (_F64, "local-memory loads and stores"),
    "insts_atomic": (_F64, "atomics and reductions"),
    "insts_barrier": (_F64, "barriers (BAR, DEPBAR, MEMBAR)"),
    "insts_branch": (_F64, "branches, jumps, calls, returns, EXIT"),
    "insts_other": (_F64, "everything else, unknown opcodes included"),
    "insts_const": (_F64, "constant-bank loads (LDC, ULDC)"),
    "insts_tex": (_F64, "texture and surface instructions (TEX, TLD, SULD, ...)"),
    "insts_tensor_hmma": (_F64, "tensor warp instructions of kind HMMA (fp16/bf16/tf32/fp8 MMA)"),
    "insts_tensor_imma": (_F64, "tensor warp instructions of kind IMMA/BMMA (integer MMA)"),
    "insts_tensor_dmma": (_F64, "tensor warp instructions of kind DMMA (fp64 MMA)"),
    "insts_tensor_gmma": (_F64, "Hopper+ warpgroup MMA warp instructions (HGMMA, QGMMA, ...)"),
    "insts_pred_off": (_F64, "predicated-off warp instructions (mask 0)"),
    "insts_partial": (_F64, "partially active warp instructions"),
    "warps": (_F64, "warps traced"),
    "insts_per_warp_mean": (_F64, "mean warp instructions per warp"),
    "insts_per_warp_max": (_F64, "max warp instructions per warp"),
    "insts_per_warp_std": (_F64, "standard deviation of warp instructions per warp"),
    "gmem_requests": (_F64, "global memory warp requests"),
    "gmem_sectors": (_F64, "32-byte global sectors touched by those requests"),
    "gmem_ld_sectors": (_F64, "32-byte sectors loaded"),
    "gmem_st_sectors": (_F64, "32-byte sectors stored"),
    "footprint_lines": (_F64, "distinct 128-byte global lines touched"),
    "reuse_le_l1": (_F64, "fraction of sampled line reuses with distance fitting L1 (<= 1K lines)"),
    "reuse_le_l2": (_F64, "fraction of sampled line reuses with distance <= 32K lines"),
    "smem_accesses": (_F64, "shared-memory warp accesses"),
    "smem_bank_conflicts": (_F64, "estimated extra shared-memory wavefronts from bank conflicts"),
    "local_bytes": (_F64, "local-memory bytes moved"),
    "dep_chain": (_F64, "mean per-warp dependency-chain length (instructions on the critical path)"),
}

_DEFAULT = {_STR: "", _I64: -1, _F64: math.nan}


def _empty(name: str, n: int) -> np.ndarray:
    dt = COLUMNS[name][0] if name in COLUMNS else _F64
    if dt == _STR:
        out = np.empty(n, dtype=object)
        out[:] = ""
        return out
    return np.full(n, _DEFAULT[dt], dtype=dt)


class KernelTable:
    """A columnar table of kernels: ``table["duration_ns"]`` is a numpy array.

    Missing columns read as all-unknown (NaN / -1 / ""), so consumers never
    need to special-case absent data.
    """

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: Mapping[str, Any], n: int | None = None) -> None:
        cols: dict[str, np.ndarray] = {}
        for key, values in columns.items():
            arr = np.asarray(values)
            if key in COLUMNS:
                dt = COLUMNS[key][0]
                arr = np.asarray(values, dtype=object) if dt == _STR else arr.astype(dt, copy=False)
            cols[key] = arr
        lengths = {len(a) for a in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns have different lengths: {sorted(lengths)}")
        self._n = lengths.pop() if lengths else (n or 0)
        self._cols = cols

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cols.get(name)
        if col is None:
            col = _empty(name, self._n)
        return col

    def __setitem__(self, name: str, values: Any) -> None:
        arr = np.asarray(values)
        if arr.ndim == 0:
            arr = np.full(self._n, arr)
        if len(arr) != self._n:
            raise ValueError(f"column {name} has {len(arr)} rows, table has {self._n}")
        if name in COLUMNS:
            dt = COLUMNS[name][0]
            arr = np.asarray(arr, dtype=object) if dt == _STR else arr.astype(dt, copy=False)
        self._cols[name] = arr

    def has(self, name: str) -> bool:
        """True if the column is present and holds at least one known value."""
        col = self._cols.get(name)
        if col is None or len(col) == 0:
            return False
        if col.dtype == _STR:
            return bool(np.any(col != ""))
        if col.dtype.kind == "f":
            return bool(np.any(~np.isnan(col)))
        return bool(np.any(col != -1))

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def as_dict(self) -> dict[str, np.ndarray]:
        return dict(self._cols)

    def take(self, index: Any) -> KernelTable:
        """Rows selected by an index array or boolean mask."""
        return KernelTable({k: v[index] for k, v in self._cols.items()})

    def without_times(self) -> KernelTable:
        """The same rows with no measured durations: what a prediction from the work alone
        reads (the columns are shared, not copied; ``duration_ns`` is a new NaN column)."""
        out = KernelTable(dict(self._cols), n=len(self))
        out["duration_ns"] = np.full(len(self), np.nan)
        return out

    @classmethod
    def concat(cls, tables: Iterable[KernelTable]) -> KernelTable:
        tabs = list(tables)
        names: list[str] = []
        for t in tabs:
            names.extend(c for c in t.columns if c not in names)
        return cls({c: np.concatenate([t[c] for t in tabs]) for c in names} if tabs else {})

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> KernelTable:
        """Build from dict rows (small tables, tests, importers)."""
        rows = list(rows)
        names: list[str] = []
        for r in rows:
            names.extend(k for k in r if k not in names)
        cols: dict[str, Any] = {}
        for name in names:
            dt = COLUMNS[name][0] if name in COLUMNS else _F64
            default = _DEFAULT.get(dt, math.nan)
            cols[name] = [r.get(name, default) if r.get(name) is not None else default for r in rows]
        return cls(cols, n=len(rows))

    def rows(self) -> Iterator[dict[str, Any]]:
        names = self.columns
        for i in range(self._n):
            yield {c: self._cols[c][i].item() if hasattr(self._cols[c][i], "item") else self._cols[c][i] for c in names}

    # ---- persistence -------------------------------------------------------------------
    def save_npz(self, path: str | Path | io.BufferedIOBase) -> None:
        """Write as a deflate-compressed .npz (string columns stored as unicode arrays).

        Compressed because a unicode array is as wide as its longest string, four bytes a
        character: the sample's 11 248 kernel names (up to 566 characters) are 25 MB stored,
        under 2 MB deflated, which also loads faster. Any ``np.load`` reads either kind."""
        # what np.savez_compressed writes, at deflate level 1: twice as fast as its level 6,
        # and the padding that makes these arrays big goes at any level
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for k, v in self._cols.items():
                with zf.open(f"{k}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, np.asanyarray(v.astype(str) if v.dtype == _STR else v),
                                              allow_pickle=False)

    @classmethod
    def load_npz(cls, path: str | Path | io.BufferedIOBase) -> KernelTable:
        with np.load(path, allow_pickle=False) as data:
            cols = {k: data[k] for k in data.files}
        for k, v in cols.items():
            if v.dtype.kind == "U":
                cols[k] = v.astype(object)
        return cls(cols)

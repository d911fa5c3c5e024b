"""The calibrated kernel-time model every cross-GPU model builds on (vectorised).

time(spec) = fixed per-kernel time + smoothmax(compute time, memory time), where
compute time = tile-padded, under-filled GEMM FLOPs / (peak for dtype x achievable
fraction; a GEMM on CUDA cores at the FP32 FMA rate even for half types,
:func:`matmul_simt_flops`), x each tile's operand-traffic factor (SIMT and tensor-core
tiles each their own, :func:`tile_reuse_factor`, :func:`mma_feed_ratio`), plus each wave of
tensor-core tiles' start (``Globals.tile_latency``), slowed on power-limited boards towards
the sustained clock as kernels get longer (:func:`clock_slowdown`), and memory time = bytes /
(DRAM bandwidth x achievable fraction for the op family); other kernels with a known grid and
block size pay for a partial tail wave of resident blocks (:func:`launch_wave_factor`). Every
term is >= its roofline counterpart, so the model never beats max(flops / peak, bytes /
bandwidth).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from cascade.calibration import BW_FAMILIES, STREAM_FAMILIES, Calibration, ResolvedParams
from cascade.calibration.accuracy import calibrated_in
from cascade.engine import convalgo, ops
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec
from cascade.kerneltable import DTYPES

#: Regime labels (index = code).
REGIMES: tuple[str, ...] = ("compute", "memory", "latency", "launch")
COMPUTE, MEMORY, LATENCY, LAUNCH = range(4)


#: Dtypes whose GEMMs accumulate in FP32: PyTorch's half-precision GEMM calls ``cublasGemmEx``
#: with compute type ``CUDA_R_32F`` (ATen ``CUDABlas.cpp``, ``gemm<at::Half>``), so where no
#: tensor core serves the dtype (P100, Pascal consumer parts) its multiply-adds are FP32 ones.
FP32_ACCUMULATE: frozenset[str] = frozenset({"fp16", "bf16"})


def matmul_simt_flops(spec: GPUSpec, dtype: str) -> float:
    """Peak FLOP/s of a matrix multiply of ``dtype`` on the CUDA cores: the FP32 FMA rate for
    the FP32-accumulating half types (not the packed-FP16 rate: P100 9.3, not 18.7 TFLOP/s),
    else the dtype's SIMT peak."""
    if dtype in FP32_ACCUMULATE:
        return spec.simt_flops("fp32")
    return spec.simt_flops(dtype)


#: Low-precision formats whose kernels a GPU without their tensor cores runs on its BF16 / FP16
#: tensor cores, as its software does (weight-only Marlin GEMMs dequantising FP8 / FP4 / INT4
#: weights, BF16 FlashAttention 2 over a BF16 cache): never on the CUDA cores.
LOW_PRECISION: tuple[str, ...] = ("fp8", "fp8_block", "fp4", "mxfp4", "int4")
_TENSOR_MATH = {"fp8_block": "fp8", "mxfp4": "fp4", "int4": "bf16"}


def tensor_dtype_on(spec: GPUSpec, dtype: str) -> str:
    """The tensor-core math a kernel of ``dtype`` runs in on ``spec`` ('' where none): its own
    (block-scaled FP8 on FP8 units, MXFP4 on FP4 units, INT4 weight-only at BF16), else for a
    low-precision format (:data:`LOW_PRECISION`) the BF16 or FP16 units its software falls back to."""
    math = _TENSOR_MATH.get(dtype, dtype)
    if spec.tensor_flops(math) > 0:
        return math
    if dtype in LOW_PRECISION:
        for alt in ("bf16", "fp16"):
            if spec.tensor_flops(alt) > 0:
                return alt
    return ""


def software_fallback(w: Workload, spec: GPUSpec) -> np.ndarray:
    """Per kernel: a tensor-core kernel of a low-precision format ``spec`` has no units for, run
    on its BF16 / FP16 tensor cores instead (:func:`tensor_dtype_on`)."""
    swapped = np.array([d in LOW_PRECISION and tensor_dtype_on(spec, d) not in ("", _TENSOR_MATH.get(d, d))
                        for d in DTYPES])
    return np.asarray(w.tensor & swapped[w.dtype_code], dtype=bool)


def on_spec(w: Workload, spec: GPUSpec) -> Workload:
    """The workload as ``spec``'s units run it: a tensor-path kernel of a dtype the spec has no
    tensor cores for (FP16 on a P100, TF32 before Ampere) runs on the CUDA cores, with their
    tiles, efficiency and :func:`matmul_simt_flops` peak; a low-precision one (FP8, FP4) on its
    BF16 / FP16 tensor cores (:func:`tensor_dtype_on`). ``w`` itself where nothing changes."""
    has = np.array([tensor_dtype_on(spec, d) != "" for d in DTYPES])
    moved = w.tensor & ~has[w.dtype_code]
    if not moved.any():
        return w
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields["tensor"] = w.tensor & ~moved
    return Workload(**fields)


def peak_flops(w: Workload, spec: GPUSpec) -> np.ndarray:
    """Peak FLOP/s each kernel can reach on a spec: the dense tensor-core peak on the tensor
    path (where the spec serves the dtype, :func:`on_spec`), a GEMM on the CUDA cores
    :func:`matmul_simt_flops`, anything else the dtype's SIMT peak."""
    w = on_spec(w, spec)
    simt = np.array([spec.simt_flops(d) for d in DTYPES])
    matmul = np.array([matmul_simt_flops(spec, d) for d in DTYPES])
    tensor = np.array([spec.tensor_flops(tensor_dtype_on(spec, d)) if tensor_dtype_on(spec, d) else 0.0
                       for d in DTYPES])
    code = w.dtype_code
    # attention over an FP8 cache runs no faster than over a BF16 one (llm-kernels: FP8 / BF16
    # prefill medians 1.04 on the B200, 1.12 on the H100): its BF16 units' rate
    low = np.array([d in LOW_PRECISION for d in DTYPES])[code] & (w.family == ops.ATTENTION)
    half = spec.tensor_flops("bf16") or spec.tensor_flops("fp16")
    tensor_peak = np.where(low & (half > 0), half, tensor[code])
    return np.where(w.tensor, tensor_peak, np.where(w.family == ops.GEMM, matmul[code], simt[code]))


def roofline_ns(w: Workload, spec: GPUSpec) -> np.ndarray:
    """max(flops / peak, bytes / bandwidth) in ns: the physical lower bound."""
    return np.maximum(w.flops / peak_flops(w, spec), w.bytes / spec.bandwidth_bps) * 1e9


def smooth_max(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """(a^p + b^p)^(1/p), computed without overflow; >= max(a, b)."""
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, safe * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def clock_slowdown(compute_ns: np.ndarray, spec: GPUSpec, tau_ns: float,
                   sustained_scale: float = 1.0) -> np.ndarray:
    """Factor (>= 1) by which a power-limited GPU's compute time exceeds its boost-clock time:
    1 + (boost / sustained - 1) x t / (t + tau) for boost-clock compute time t, where
    sustained = the spec's ``sustained_clock_mhz`` x ``sustained_scale`` (at most boost).
    Short kernels finish near boost; long heavy ones settle at the sustained clock. 1
    everywhere for GPUs that sustain boost (``sustained_clock_mhz`` unset)."""
    ratio = max(1.0, spec.sustained_clock_ratio / max(sustained_scale, 1e-9))
    if ratio <= 1.0:
        return np.ones_like(compute_ns)
    t = np.where(np.isfinite(compute_ns), np.maximum(compute_ns, 0.0), 0.0)
    return 1.0 + (ratio - 1.0) * t / (t + max(tau_ns, 1e-9))


def tile_key(tensor: bool, batched: bool) -> str:
    """Calibration key of the GEMM tile table."""
    return ("tensor" if tensor else "simt") + ("_batched" if batched else "")


#: Tiles an architecture's library may pick from when its policy is "best" ([0, 0]).
TILE_CANDIDATES: tuple[tuple[int, int], ...] = (
    (32, 32), (64, 32), (32, 64), (64, 64), (128, 32), (32, 128), (128, 64), (64, 128),
    (128, 128), (256, 128), (128, 256))


def tile_reuse_factor(ta: np.ndarray, tb: np.ndarray, reuse: float) -> np.ndarray:
    """Time multiplier (>= 1) of a GEMM tile's operand traffic: each K step of a ta x tb tile
    loads ta + tb operands for ta x tb multiply-adds, so a small tile spends more of its time
    moving operands (shared memory, registers) per FLOP: 1 + ``reuse`` x (ta + tb) / (ta x tb).
    1 everywhere with ``reuse`` 0 (calibrations that predate the term)."""
    if reuse <= 0:
        return np.ones(np.broadcast(ta, tb).shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = 1.0 + reuse * (ta + tb) / np.maximum(ta * tb, 1.0)
    return np.where(np.isfinite(f), f, 1.0)


#: FP16 elements an SM's shared memory delivers per clock (128 bytes: Volta to Blackwell).
SMEM_ELEMENTS_PER_CLOCK = 64.0


def mma_feed_ratio(spec: GPUSpec) -> float:
    """Dense FP16 tensor-core multiply-adds per clock per SM over the FP16 elements its shared
    memory delivers per clock: how many multiply-adds each operand element read must feed for
    the tensor cores to run at peak (16 on the A100, 30 on the H100, 9 on the V100, 8 on the T4). The
    same for every tensor dtype (TF32 elements are twice the bytes at half the rate, FP8 half
    at twice); 0 without tensor cores."""
    fma = spec.tensor_flops("fp16") / (2.0 * spec.sms * spec.clock_hz)
    return float(fma / SMEM_ELEMENTS_PER_CLOCK) if fma > 0 else 0.0


#: K depth of one step of a SIMT GEMM tile's main loop (cuBLAS's ``*_sgemm_*`` kernels load 8
#: K-slices of A and B per shared-memory stage).
SIMT_K_STEP = 8.0

#: Threads per block of the cuBLAS SIMT SGEMM kernel of a tile, where it is not 256: the launch
#: shapes of every ``volta_sgemm_*`` and ``ampere_sgemm_*`` kernel in the measured data (NeuSight's
#: ``Block x``): 64x64 runs 64 threads, 128x64 runs 128, 32x32 (``sliced1x4``) runs 128; 128x32,
#: 32x128, 64x32 (``sliced1x4``) and 128x128 run 256. 64x128 is taken as 128x64's mirror.
SIMT_TILE_THREADS: dict[tuple[int, int], int] = {(64, 64): 64, (128, 64): 128, (64, 128): 128, (32, 32): 128}
SIMT_TILE_THREADS_DEFAULT = 256


def named_tile(w: Workload, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """True where the tile in use is the one the kernel's own name gives (the kernel that ran,
    so its launch shape -- grid, block size -- belongs to that tile)."""
    return (ta == w.tile_a) & (tb == w.tile_b) & (w.tile_a > 0)


def tile_warp_fill(w: Workload, spec: GPUSpec, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """Tiles an SM must hold at once for its warp schedulers all to issue: a SIMT GEMM tile
    computed by fewer warps than the SM has schedulers (``schedulers_per_sm``) leaves the others
    idle while it is alone on its SM, so until ``schedulers / warps`` tiles share an SM each
    runs no faster than alone; ``max(1, schedulers / warps)`` per kernel (1 for tensor-core
    tiles, whose kernels run 4+ warps, and for tiles of 4+ warps). Threads per tile: the
    kernel's own block size where the tile is the one it named, else the library's
    (:data:`SIMT_TILE_THREADS`)."""
    threads = np.full(len(w), float(SIMT_TILE_THREADS_DEFAULT))
    for (a, b), t in SIMT_TILE_THREADS.items():
        threads[(ta == a) & (tb == b)] = t
    named = named_tile(w, ta, tb) & np.isfinite(w.threads) & (w.threads > 0)
    threads = np.where(named, w.threads, threads)
    warps = np.ceil(threads / 32.0)
    fill = np.maximum(1.0, spec.schedulers_per_sm / np.maximum(warps, 1.0))
    return np.where(w.tensor, 1.0, fill)


def gemm_compute_ns(w: Workload, spec: GPUSpec, rate: np.ndarray, ta: np.ndarray, tb: np.ndarray,
                    min_tile_area: float, wave_quant: float = 0.0, splits: np.ndarray | None = None,
                    tile_reuse: float = 0.0, tensor_tile_reuse: float = 0.0,
                    tile_latency: float = 0.0, warp_fill: float = 0.0,
                    simt_step_ns: float = 0.0) -> np.ndarray:
    """Compute time of tiled GEMMs: each SM works through its share of tiles (at least one);
    a tile smaller than ``min_tile_area`` takes as long as one of that area (its K loop, not
    its size, bounds it; split over ``k_split`` warps for sliced-K kernels). ``wave_quant``
    in [0, 1] blends fractional waves (0) with whole waves (1: the tail wave costs a full one).
    ``tile_reuse`` / ``tensor_tile_reuse``: a small SIMT / tensor-core tile's operand traffic
    per FLOP (:func:`tile_reuse_factor`), each path its own. ``tile_latency``: each wave of
    tensor-core tiles starts and ends ``tile_latency`` x the spec's DRAM latency late.
    ``warp_fill`` 1: an SM runs no fewer than :func:`tile_warp_fill` tiles' time (a SIMT tile of
    fewer warps than schedulers, alone on its SM, leaves schedulers idle); 0: at least one.
    ``simt_step_ns``: the least time each K step (:data:`SIMT_K_STEP` deep, per warp slice of a
    sliced-K kernel) of a SIMT GEMM takes on its SM, however few tiles share the SM (operand
    loads that a few warps cannot hide); 0: none. ``rate`` is the sustained FLOP/s of the whole GPU."""
    with np.errstate(invalid="ignore"):
        tiles = w.batch * np.ceil(w.n / np.maximum(ta, 1)) * np.ceil(w.m / np.maximum(tb, 1))
        s = np.ones(len(w)) if splits is None else splits
        waves = tiles * s / spec.sms
        if wave_quant > 0:
            waves = waves + wave_quant * (np.ceil(waves) - waves)
        per_sm = np.maximum(waves, tile_warp_fill(w, spec, ta, tb) if warp_fill > 0 else 1.0)
        tile_flops = 2.0 * (w.k / s) * np.maximum(ta * tb, min_tile_area / w.k_split)
        traffic = np.where(w.tensor, tile_reuse_factor(ta, tb, tensor_tile_reuse * mma_feed_ratio(spec)),
                           tile_reuse_factor(ta, tb, tile_reuse))
        start = np.where(w.tensor, tile_latency * spec.dram_latency_ns, 0.0)
        out = per_sm * (tile_flops * traffic / (rate / spec.sms) * 1e9 + start)
        if simt_step_ns > 0:
            steps = np.ceil(w.k / s / (SIMT_K_STEP * w.k_split))
            out = np.where(w.tensor, out, np.maximum(out, steps * simt_step_ns))
        return out


#: Smallest K chunk of a split-K GEMM.
SPLIT_K_MIN_CHUNK = 256.0


def split_k_factors(w: Workload, spec: GPUSpec, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """K-split of each GEMM: for the kernel that ran (its named tile, a known grid), the grid's
    blocks per output tile (cuBLAS puts the split in gridDim.z); for a tile chosen by a policy
    (another GPU's library), the split that fills the SMs of an under-filled grid, in K chunks
    of at least 256; 1 for the rest."""
    with np.errstate(invalid="ignore", divide="ignore"):
        tiles = w.batch * np.ceil(w.n / np.maximum(ta, 1)) * np.ceil(w.m / np.maximum(tb, 1))
        most = np.maximum(np.floor(w.k / SPLIT_K_MIN_CHUNK), 1.0)
        named = named_tile(w, ta, tb) & np.isfinite(w.blocks)
        measured = np.clip(np.round(w.blocks / tiles), 1.0, most)
        fill = np.clip(np.floor(spec.sms / tiles), 1.0, most)
        out = np.where(named, measured, fill)
    return np.where(w.is_gemm & np.isfinite(out), out, 1.0)


def target_tiles(w: Workload, spec: GPUSpec, cal: Calibration, source: GPUSpec | None,
                 rate: np.ndarray | None = None, rule_of: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """GEMM tile per kernel on ``spec``: the named tile when the kernel ran on the same
    architecture, else the architecture's policy from calibration: a fixed tile, or
    ([0, 0]) the candidate tile with the least modelled compute time. ``rule_of``: on the
    paths where that architecture has no policy fitted on its own data, apply its (borrowed
    or least-time) rule on ``spec`` instead of the named tiles or ``spec``'s policy (the
    source side of ``ScaledModel``)."""
    w = on_spec(w, spec)
    ta = w.tile_a.copy()
    tb = w.tile_b.copy()
    keep_named = source is not None and source.arch == spec.arch
    batched = w.batch > 1
    area = cal.globals.min_tile_area
    for tensor in (False, True):
        for bat in (False, True):
            key = tile_key(tensor, bat)
            foreign = rule_of is not None and not cal.has_tile_policy(rule_of, key)
            arch = rule_of if foreign and rule_of else spec.arch
            a, b = cal.tile(arch, key)
            sel = (w.tensor == tensor) & (batched == bat)
            if keep_named and not foreign:
                sel &= ta <= 0
            if not sel.any():
                continue
            if a > 0 and b > 0:  # a fixed tile
                ta[sel] = a
                tb[sel] = b
                continue
            idx = np.flatnonzero(sel & w.is_gemm)
            if len(idx) == 0:
                continue
            sub = _take(w, idx)
            r = np.ones(len(idx)) if rate is None else rate[idx]
            # policy (0, A): the least-time candidate among tiles of at least A outputs;
            # (-1, 0): the least-time tile among those the arch's library was seen to use
            menu = cal.tile_menu(arch, key) if a < 0 else []
            allowed = menu or [c for c in TILE_CANDIDATES if c[0] * c[1] >= b] or [TILE_CANDIDATES[-1]]
            times = np.stack([gemm_compute_ns(sub, spec, r, np.full(len(idx), float(ca)),
                                              np.full(len(idx), float(cb)), area,
                                              cal.globals.wave_quant, tile_reuse=cal.globals.tile_reuse,
                                              tensor_tile_reuse=cal.globals.tensor_tile_reuse,
                                              tile_latency=cal.globals.tile_latency,
                                              warp_fill=cal.globals.warp_fill)
                              for ca, cb in allowed])
            best = np.argmin(times, axis=0)
            cand = np.asarray(allowed, dtype=np.float64)
            ta[idx] = cand[best, 0]
            tb[idx] = cand[best, 1]
    return ta, tb


def residual_cells(w: Workload, width: float) -> np.ndarray:
    """Cell key of each kernel in a :class:`cascade.calibration.ResidualTable` grid:
    (dtype code, tensor path) and log2(1 + batch, m, n, k) in cells of ``width`` octaves,
    packed into one int64 (6 bits per dimension; -1 for kernels that are not GEMMs)."""
    out = np.full(len(w), -1, dtype=np.int64)
    idx = np.flatnonzero(w.is_gemm)
    if len(idx) == 0:
        return out
    with np.errstate(invalid="ignore", divide="ignore"):
        key = w.dtype_code[idx].astype(np.int64) * 2 + w.tensor[idx].astype(np.int64)
        for f in ("batch", "m", "n", "k"):
            d = np.nan_to_num(getattr(w, f)[idx], nan=0.0)
            b = np.floor(np.log2(1.0 + np.maximum(d, 0.0)) / width).astype(np.int64)
            key = key * 64 + np.clip(b, 0, 63)
    out[idx] = key
    return out


#: Why a kernel's prediction is extrapolated (bits of :func:`extrapolation_flags`).
EXTRAPOLATION_REASONS: tuple[tuple[int, str], ...] = (
    (1, "target GPU not calibrated for this measurement kind"),
    (2, "source GPU not calibrated for this measurement kind"),
    (4, "GEMM shape outside the calibration data's shapes"),
    (8, "no measured time or work: launch overhead or roofline only"),
    (16, "not simulated by Accel-Sim (not traced or skipped): built-in model used"),
    (32, ("no shapes: work inferred from the measured time and the kernel name's family "
          "(compute- or memory-class)")),
    (64, ("no shapes and no known family: work inferred from the measured time as a "
          "compute/memory blend")),
    (128, "fp32 convolution moved to TF32 tensor cores on the target (PyTorch's cuDNN default)"),
    (256, ("tensor-core kernel on the source, no tensor cores for its dtype on the target: "
           "CUDA cores, FP32 multiply-adds")),
    (512, ("convolution or pooling window on another GPU: the target runs its own cuDNN algorithm and "
           "window arithmetic (quoted at the single-operator figure for convolutions, KernelBench)")),
    (1024, ("batched FP32 GEMM on a GPU whose cuBLAS SGEMM kernels no data shows (Pascal, Blackwell): "
            "least-time tile, fast where the library runs larger ones (bmm into an A100 left out with "
            "no Ampere data: 25%)")),
    (2048, ("FP8 / FP4 kernel on a GPU without those tensor cores: run as its software runs it there, on "
            "its BF16 / FP16 tensor cores (weight-only Marlin GEMMs, FlashAttention 2 over a BF16 cache)")),
)
(TARGET_UNCALIBRATED, SOURCE_UNCALIBRATED, SHAPE_OUTSIDE, BOUND_ONLY, NOT_SIMULATED,
 INFERRED_FROM_NAME, INFERRED_BLEND, TF32_CONV, OFF_TENSOR, WINDOW, UNSEEN_TILES, SOFTWARE_FALLBACK) = (
    b for b, _ in EXTRAPOLATION_REASONS)
#: dtype of per-kernel extrapolation bits (every bit above fits).
FLAGS_DTYPE = np.int16

#: A kernel whose measured time exceeds this many launch overheads is never launch-bound.
LONG_KERNEL_LAUNCHES = 4.0


def extrapolation_flags(w: Workload, target: GPUSpec, source: GPUSpec | None, cal: Calibration,
                        measurement: str, cells: dict[float, np.ndarray] | None = None) -> np.ndarray:
    """Per kernel, a bit mask of :data:`EXTRAPOLATION_REASONS` (0: inside what the calibration
    was fitted on). A prediction on the source GPU itself has none (measured times are kept).
    A GEMM is outside the calibration's shapes when neither GPU's shape-residual grid of the
    measurement kind has a cell (>= ``min_rows`` fit rows) for it; a kind without grids on
    either GPU cannot say, and sets no shape bit. ``cells``: :func:`residual_cells` already
    computed, by grid width (filled in as computed)."""
    n = len(w)
    flags = np.zeros(n, dtype=FLAGS_DTYPE)
    if source is not None and source.id == target.id:
        return flags
    if not calibrated_in(cal, target.id, measurement):
        flags |= TARGET_UNCALIBRATED
    if source is not None and not calibrated_in(cal, source.id, measurement):
        flags |= SOURCE_UNCALIBRATED
    grids = [g for g in (cal.residual_table(measurement, target),
                         cal.residual_table(measurement, source) if source is not None else None)
             if g is not None and g.keys]
    cells = {} if cells is None else cells
    if grids and w.is_gemm.any():
        covered = np.zeros(n, dtype=bool)
        for g in grids:
            if g.width not in cells:
                cells[g.width] = residual_cells(w, g.width)
            covered |= g.covers(cells[g.width])
        # a GEMV's regime is a streaming kernel's, which the operator data sets cover
        flags |= np.where(w.is_gemm & ~covered & ~streams_weights(w), SHAPE_OUTSIDE, 0).astype(FLAGS_DTYPE)
    key = tile_key(False, True)
    if w.is_gemm.any() and not cal.tiles_seen(target.arch, key):
        # the tile of a batched SIMT GEMM comes from a rule no data checked for this library (the
        # kernel's own named tile is kept only where it ran on the target's architecture)
        ruled = w.is_gemm & ~w.tensor & (np.nan_to_num(w.batch) > 1) & ~streams_weights(w)
        if source is not None and source.arch == target.arch:
            ruled &= w.tile_a <= 0
        flags |= np.where(ruled, UNSEEN_TILES, 0).astype(FLAGS_DTYPE)
    return flags


def describe_flags(flags: np.ndarray) -> dict[str, int]:
    """Kernels per extrapolation reason (only reasons that occur)."""
    return {text: int(np.count_nonzero(flags & bit)) for bit, text in EXTRAPOLATION_REASONS
            if np.any(flags & bit)}


def resident_blocks(threads: np.ndarray, regs: np.ndarray, smem: np.ndarray, spec: GPUSpec) -> np.ndarray:
    """Blocks of ``threads`` threads an SM of ``spec`` holds at once (>= 1): the least of the
    spec's block limit and what its threads, warps, registers (``regs`` per thread, allocated
    per warp in the spec's unit; <= 0 or NaN: not limiting) and shared memory (``smem`` bytes
    per block; <= 0 or NaN: none) allow."""
    with np.errstate(invalid="ignore", divide="ignore"):
        wpb = np.ceil(threads / 32.0)
        bps = np.minimum(np.floor(spec.max_threads_per_sm / (wpb * 32.0)), np.floor(spec.max_warps_per_sm / wpb))
        np.minimum(bps, float(spec.max_blocks_per_sm), out=bps)
        limited = np.flatnonzero(regs > 0)  # only rows whose registers are known (NaN compares False)
        if len(limited):
            per_warp = np.ceil(regs[limited] * 32.0 / spec.reg_alloc_unit) * spec.reg_alloc_unit
            bps[limited] = np.minimum(bps[limited], np.floor(spec.regs_per_sm / (per_warp * wpb[limited])))
        limited = np.flatnonzero(smem > 0)
        if len(limited):
            bps[limited] = np.minimum(bps[limited], np.floor(spec.smem_per_sm_kb * 1024.0 / smem[limited]))
    return np.maximum(np.nan_to_num(bps, nan=1.0), 1.0)


def launch_waves(w: Workload, spec: GPUSpec) -> np.ndarray:
    """Waves of each non-GEMM kernel with a known launch shape: blocks / (SMs x
    :func:`resident_blocks`); NaN for GEMMs (their tiles have :func:`gemm_compute_ns`) and
    where grid or block size is unknown."""
    with np.errstate(invalid="ignore", divide="ignore"):
        waves = w.blocks / (spec.sms * resident_blocks(w.threads, w.regs, w.smem, spec))
    known = ~w.is_gemm & np.isfinite(w.threads) & np.isfinite(waves) & (waves > 0)
    return np.where(known, waves, np.nan)


def launch_wave_factor(w: Workload, spec: GPUSpec, quant: float) -> np.ndarray:
    """Factor (>= 1) on the work time of kernels with a known launch shape
    (``Globals.launch_waves``): (W + quant x (ceil(W) - W)) / W for W :func:`launch_waves`
    of at least one wave, so a partial tail wave costs up to a whole one; 1 for a grid under
    one wave (how fast a few blocks draw memory is not modelled: their time stays bytes /
    bandwidth), elsewhere and at ``quant`` 0."""
    if quant <= 0 or len(w) == 0:
        return np.ones(len(w))
    waves = launch_waves(w, spec)
    with np.errstate(invalid="ignore"):
        factor = (waves + quant * (np.ceil(waves) - waves)) / waves
        factor = np.where(waves >= 1.0, factor, 1.0)
    return np.where(np.isfinite(factor), factor, 1.0)


def family_bw_eff(w: Workload, params: ResolvedParams) -> np.ndarray:
    """Achievable DRAM bandwidth fraction of every kernel (its family's calibrated factor; a
    streaming family from ``stream_bw_eff`` where the GPU's fits never saw one)."""
    bw_mult = np.ones(len(w))
    base = np.full(len(w), params.bw_eff)
    for i, fam in enumerate(ops.FAMILIES):
        if fam in BW_FAMILIES and params.family_bw.get(fam, 1.0) != 1.0:
            bw_mult[w.family == i] = params.family_bw[fam]
        if params.stream_bw_eff is not None and fam in STREAM_FAMILIES:
            base[w.family == i] = params.stream_bw_eff
    return np.minimum(base * bw_mult, 1.0)


def memory_ns(w: Workload, spec: GPUSpec, bw_eff: np.ndarray, l2_resident: float) -> np.ndarray:
    """DRAM-traffic time of every kernel: bytes / (bandwidth x achievable fraction), where up
    to ``l2_resident`` x the L2 capacity of a kernel's bytes (a rerun operator's working set
    still in L2) moves at the L2 bandwidth instead (same achievable fraction)."""
    if l2_resident <= 0:
        return w.bytes / (spec.bandwidth_bps * bw_eff) * 1e9
    cached = np.minimum(np.nan_to_num(w.bytes), l2_resident * spec.l2_bytes)
    return ((w.bytes - cached) / spec.bandwidth_bps + cached / spec.l2_bandwidth_bps) / bw_eff * 1e9


def family_fixed_mult(w: Workload, params: ResolvedParams) -> np.ndarray:
    """Per kernel, the multiplier of its op family's fixed per-kernel time (1 where none)."""
    mult = np.ones(len(w))
    for fam, value in params.family_fixed.items():
        if fam in ops.FAMILIES and value != 1.0:
            mult[w.family == ops.FAMILIES.index(fam)] = value
    return mult


def infer_shapeless_work(w: Workload, t_src: np.ndarray, src: GPUSpec, params: ResolvedParams,
                         fixed_src: float) -> tuple[Workload, np.ndarray]:
    """Give kernels with a measured time but no known work (no shapes, FLOPs or bytes) the work
    that time implies on the source, in the class their name says (:func:`ops.work_class`):

    * compute-class (cuBLAS / cuDNN / CUTLASS / xmma GEMM and convolution, attention):
      ``flops = (t - fixed) x peak(dtype, tensor path the name says) x achievable fraction``;
    * memory-class (elementwise, reduction, norm, softmax, copy, index):
      ``bytes = (t - fixed) x DRAM bandwidth x the family's achievable fraction``;
    * blend (anything else): both, each alone taking ``t - fixed`` on the source, so the
      side that scales worse bounds it on the target.

    Only kernels that ran more than :data:`LONG_KERNEL_LAUNCHES` launch overheads are
    inferred (shorter ones are launch-bound as measured). Returns the completed workload
    and the extrapolation bits (:data:`INFERRED_FROM_NAME`, :data:`INFERRED_BLEND`).
    """
    n = len(w)
    flags = np.zeros(n, dtype=FLAGS_DTYPE)
    with np.errstate(invalid="ignore"):
        todo = ((w.flops <= 0) & (w.bytes <= 0) & np.isfinite(t_src)
                & (t_src > LONG_KERNEL_LAUNCHES * fixed_src))
    if not todo.any():
        return w, flags
    work_ns = np.where(todo, np.maximum(np.nan_to_num(t_src) - fixed_src, 0.0), 0.0)
    cls = ops.work_class(w.family)
    rate = peak_flops(w, src) * np.where(w.tensor, params.tensor_eff, params.simt_eff)
    bw = src.bandwidth_bps * family_bw_eff(w, params)
    compute = todo & (cls != ops.MEMORY_CLASS)
    memory = todo & (cls != ops.COMPUTE_CLASS)
    flops = np.where(compute, work_ns * 1e-9 * rate, w.flops)
    nbytes = np.where(memory, work_ns * 1e-9 * bw, w.bytes)
    flags[todo & (cls != ops.BLEND_CLASS)] = INFERRED_FROM_NAME
    flags[todo & (cls == ops.BLEND_CLASS)] = INFERRED_BLEND
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields.update(flops=flops, bytes=nbytes)
    return Workload(**fields), flags


_CUDNN_CONV = ("conv", "cudnn", "fprop", "dgrad", "wgrad", "winograd", "implicit_convolve")
#: Names that pin a convolution to FP32 multiply-adds on the CUDA cores whatever the GPU has
#: (cuDNN's ``scudnn`` / ``implicit_convolve_sgemm`` kernels, FFMA xmma kernels): the kernel that
#: ran says how it ran.
_FP32_CONV_NAME = ("scudnn", "sgemm", "ffma", "_simt")
#: FLOPs a TF32 cuDNN convolution spends per FLOP of the FP32 one it replaces (implicit-GEMM
#: address work, filter shapes that fill tiles poorly, FP32 operands to convert): KernelBench's
#: convolutions of at least 64 FLOPs per byte reach a median 15% of an A100's TF32 peak and 12%
#: of an L40S's (large TF32 GEMMs: about 75%); ACCURACY.md, session 16, has the sweep (2.0 before;
#: 2.5-3 score best with each GPU left out of the transfer fit, 4 worse).
TF32_CONV_OVERHEAD = 3.0


def _conv_rows(w: Workload, names: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(convolutions by name, those whose name pins them to FP32 CUDA-core math), read for the
    ``rows`` asked about only, each distinct name once."""
    conv = np.zeros(len(w), dtype=bool)
    pinned = np.zeros(len(w), dtype=bool)
    idx = np.flatnonzero(rows)
    if len(idx) == 0:
        return conv, pinned
    uniq, inv = np.unique(names[idx].astype(str), return_inverse=True)
    lowered = np.char.lower(uniq)
    conv_u = np.zeros(len(uniq), dtype=bool)
    for word in _CUDNN_CONV:
        conv_u |= np.char.find(lowered, word) >= 0
    pinned_u = np.zeros(len(uniq), dtype=bool)
    for word in _FP32_CONV_NAME:
        pinned_u |= np.char.find(lowered, word) >= 0
    conv[idx] = conv_u[inv] & (w.family[idx] == ops.GEMM)
    pinned[idx] = pinned_u[inv]
    return conv, pinned


def convolutions(w: Workload, names: np.ndarray) -> np.ndarray:
    """Convolution kernels: GEMM-family rows without GEMM dims whose op or name says convolution."""
    cand = (w.family == ops.GEMM) & ~w.is_gemm
    return _conv_rows(w, names, cand)[0] if cand.any() else cand


def convolution_kernels(w: Workload, names: np.ndarray) -> np.ndarray:
    """Every convolution among the GEMM-family rows, by op or name, with GEMM dims (a trace with
    shapes gives its implicit GEMM) or without: cuDNN picks each GPU's own algorithm for all of
    them, so on another GPU (or from the work alone) each is flagged :data:`WINDOW` and quoted at
    the single-operator figure for convolutions (:func:`convolutions` are those the window roof
    is fitted on)."""
    cand = w.family == ops.GEMM
    return _conv_rows(w, names, cand)[0] if cand.any() else cand


def cudnn_math(w: Workload, names: np.ndarray, spec: GPUSpec, *, measured: bool = False
               ) -> tuple[Workload, np.ndarray]:
    """The workload as PyTorch's cuDNN runs it on ``spec``: an FP32 convolution runs on TF32
    tensor cores where the spec has them (``torch.backends.cudnn.allow_tf32`` defaults to True),
    at :data:`TF32_CONV_OVERHEAD` FLOPs per FP32 FLOP; elsewhere, and for FP32 matmuls
    (``torch.backends.cuda.matmul.allow_tf32`` defaults to False), nothing changes.
    ``measured``: ``spec`` is the GPU the times were measured on, so a name that says how the
    kernel ran (``scudnn``, ``sgemm``, ``ffma``: FP32 CUDA-core math) is kept as it ran, and only
    a convolution whose name does not say (a harness row named ``conv``, a generic ``cudnn``
    kernel) is read as the TF32 one PyTorch ran there; on a target every FP32 convolution moves
    (cuDNN picks that GPU's own kernels). A convolution whose name says TF32 tensor cores
    (``sm80_xmma_fprop_implicit_gemm_tf32f32_...``) ran that path: it costs the same
    :data:`TF32_CONV_OVERHEAD`, on the GPU it was traced on and on any that keeps it there, so a
    traced TF32 convolution and a moved FP32 one are the same work. Returns the workload and
    the rows charged the overhead (what :func:`measured_work` takes back off)."""
    charged = np.zeros(len(w), dtype=bool)
    if spec.tensor_flops("tf32") <= 0 or len(w) == 0:
        return w, charged
    fp32, tf32 = DTYPES.index("fp32"), DTYPES.index("tf32")
    gemm = w.family == ops.GEMM
    cand = gemm & (w.dtype_code == fp32) & ~w.tensor
    named = gemm & (w.dtype_code == tf32) & w.tensor
    if not (cand | named).any():
        return w, charged
    conv, pinned = _conv_rows(w, names, cand | named)
    moved = cand & conv & ~pinned if measured else cand & conv
    charged = moved | (named & conv)
    if not charged.any():
        return w, charged
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    dtype = w.dtype.copy()
    dtype[moved] = "tf32"
    code = w.dtype_code.copy()
    code[moved] = tf32
    fields.update(dtype=dtype, dtype_code=code, tensor=w.tensor | moved,
                  flops=np.where(charged, w.flops * TF32_CONV_OVERHEAD, w.flops))
    return Workload(**fields), charged


def measured_work(w: Workload, w_src: Workload, moved: np.ndarray) -> Workload:
    """``w`` (the kernels as the trace names them) with the work inferred on the source
    (``w_src``, after :func:`cudnn_math` moved ``moved`` rows to TF32 there), in the FP32 terms
    of ``w``: a moved row's TF32 FLOPs / :data:`TF32_CONV_OVERHEAD`. What the target's own
    :func:`target_math` starts from."""
    if w_src is w:
        return w
    fields = {f: getattr(w, f) for f in w.__dataclass_fields__}
    fields.update(flops=np.where(moved, w_src.flops / TF32_CONV_OVERHEAD, w_src.flops), bytes=w_src.bytes)
    return Workload(**fields)


def target_math(w: Workload, names: np.ndarray, src: GPUSpec, target: GPUSpec, *, cudnn_tf32: bool = True
                ) -> tuple[Workload, np.ndarray]:
    """The workload as the target runs it: FP32 convolutions on TF32 tensor cores where the
    target has them (:func:`cudnn_math`; flagged :data:`TF32_CONV` where the source had none, so
    the path changed), tensor-core kernels of a dtype the target has no tensor cores for on its
    CUDA cores (:func:`on_spec`, flagged :data:`OFF_TENSOR`). ``w`` is the workload as measured
    (before :func:`cudnn_math` on the source). ``cudnn_tf32`` False: the run turned TF32 off, so
    FP32 convolutions stay FP32. Returns the workload and the bits per kernel."""
    flags = np.where(software_fallback(w, target), SOFTWARE_FALLBACK, 0).astype(FLAGS_DTYPE)
    moved = on_spec(w, target)
    if moved is not w:
        flags |= np.where(w.tensor & ~moved.tensor, OFF_TENSOR, 0).astype(FLAGS_DTYPE)
        w = moved
    if not cudnn_tf32:
        return w, flags
    w, conv = cudnn_math(w, names, target)
    if src.tensor_flops("tf32") <= 0:
        flags |= np.where(conv, TF32_CONV, 0).astype(FLAGS_DTYPE)
    return w, flags


def fp32_convolutions(w: Workload, names: np.ndarray, op: np.ndarray) -> np.ndarray:
    """Convolutions with their implicit GEMM known (m, n, k) that run FP32 on the CUDA cores: by
    op (``conv2d``, ``convolution``...) or by name (:func:`convolution_kernels`)."""
    cand = w.is_gemm & (w.dtype_code == DTYPES.index("fp32")) & ~w.tensor
    if not cand.any():
        return cand
    idx = np.flatnonzero(cand)
    uniq, inv = np.unique(np.asarray(op[idx]).astype(str), return_inverse=True)
    by_op = np.char.find(np.char.lower(uniq), "conv") >= 0
    out = np.zeros(len(w), dtype=bool)
    out[idx] = by_op[inv]
    return out | (cand & convolution_kernels(w, names))


def with_conv_cost(w: Workload, rows: np.ndarray, factor: np.ndarray) -> Workload:
    """``w`` with each of ``rows``' implicit GEMM run at ``factor`` times its direct work (its
    cuDNN algorithm's cost, :class:`cascade.calibration.ConvAlgos`): K and the FLOPs scaled."""
    if not rows.any():
        return w
    f = np.where(rows, factor, 1.0)
    fields = {name: getattr(w, name) for name in w.__dataclass_fields__}
    fields.update(k=w.k * f, flops=w.flops * f)
    return Workload(**fields)


def conv_algorithm_costs(w_src: Workload, w_tgt: Workload, names: np.ndarray, op: np.ndarray, src: GPUSpec,
                         target: GPUSpec, cal: Calibration) -> tuple[Workload, Workload, np.ndarray]:
    """The FP32 convolutions of a move as cuDNN runs them on each GPU (:class:`ConvAlgos` fitted):
    on the source the algorithm its kernel name says, at that algorithm's cost; on the target the
    cost of what the target's architecture picks for the shape (the source's own algorithm on the
    same SM design). Returns both workloads and the rows changed (none without a fit or on the
    source GPU itself)."""
    fit = cal.conv_algos
    none = np.zeros(len(w_src), dtype=bool)
    if fit is None or not fit.cost or src.id == target.id or len(w_src) == 0:
        return w_src, w_tgt, none
    rows = fp32_convolutions(w_src, names, op) & fp32_convolutions(w_tgt, names, op)
    if not rows.any():
        return w_src, w_tgt, none
    codes = np.full(len(w_src), convalgo.OTHER, dtype=np.int8)
    idx = np.flatnonzero(rows)
    codes[idx] = convalgo.algorithms(names[idx])
    f_src = convalgo.source_cost(codes, fit.cost)
    if src.sm_version == target.sm_version:
        f_tgt = f_src
    else:
        f_tgt = np.ones(len(w_src))
        cells = convalgo.shape_cells(w_tgt.m[idx], w_tgt.n[idx], w_tgt.k[idx], fit.width)
        f_tgt[idx] = convalgo.expected_cost(cells, target.arch, fit.choice, fit.cost)
    return with_conv_cost(w_src, rows, f_src), with_conv_cost(w_tgt, rows, f_tgt), rows


#: GEMMs with at most this many rows (or columns) of output stream their weights: a GEMV or a
#: decode step's small-M projection reads every weight once for one or a few multiply-adds each,
#: so DRAM bandwidth bounds it on every GPU, whatever tile the library names (a tile's unused
#: rows are not FLOPs any unit waits on).
GEMV_ROWS = 8.0


def streams_weights(w: Workload) -> np.ndarray:
    """Unbatched GEMMs whose output has at most :data:`GEMV_ROWS` rows or columns (a GEMV, a
    small-M projection over a weight matrix; batched small GEMMs such as attention's keep their
    tiles: their operands are activations, and their under-filled grids are latency-bound)."""
    with np.errstate(invalid="ignore"):
        small = np.fmin(np.where(w.m > 0, w.m, np.nan), np.where(w.n > 0, w.n, np.nan)) <= GEMV_ROWS
    return w.is_gemm & small & ~(w.batch > 1)


#: How much the achievable fraction of a peak (compute or bandwidth) may differ between two
#: GPUs on the same kernel: the bracket of :func:`ratio_bracket` is widened by this factor on
#: each side. In the measured FP32 data the largest GEMMs reach 85-93% of the FP32 peak on the
#: V100 and the A100 alike, and streaming kernels 60-90% of DRAM bandwidth: a spread of about
#: 1.2 between architectures, never the 2-8x a wrong regime gives.
ACHIEVABLE_SPREAD = 1.5

#: A kernel whose measured work (source time less its fixed launch or harness time) is under this
#: many microseconds is latency-bound: its ratio may follow the fixed-time, clock or DRAM latency
#: ratio; longer ones keep to the bracket of their work.
SHORT_KERNEL_US = 10.0


def ratio_bracket(w_src: Workload, w_tgt: Workload, src: GPUSpec, target: GPUSpec,
                  sustained_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, the least and the most that its work's time may scale by from ``src`` to
    ``target`` (target time / source time), whatever a model says: between the compute ratio
    of its path (FLOPs over the peak of its dtype and unit on each GPU, so a convolution moved
    to TF32 or a tensor kernel moved to CUDA cores scales by what it runs on) and the DRAM
    bandwidth ratio, and, for a working set that fits both L2s, the L2 bandwidth ratio.
    A power-limited board (``sustained_clock_mhz``) widens its compute side by its boost /
    sustained clock ratio (x ``sustained_scale``), and both ends by :data:`ACHIEVABLE_SPREAD`
    (the fraction of a peak two architectures reach on one kernel differs that much). Physics,
    no fitted efficiency: a name-based or fitted model may move inside it, never outside."""
    ps = peak_flops(w_src, src)
    pt = peak_flops(w_tgt, target)
    with np.errstate(invalid="ignore", divide="ignore"):
        known = (w_src.flops > 0) & (w_tgt.flops > 0)
        rc = np.where(known, (w_tgt.flops / pt) / (w_src.flops / ps), ps / pt)
    rc = np.where(np.isfinite(rc) & (rc > 0), rc, 1.0)
    slow_s = max(1.0, src.sustained_clock_ratio / max(sustained_scale, 1e-9))
    slow_t = max(1.0, target.sustained_clock_ratio / max(sustained_scale, 1e-9))
    rb = src.bandwidth_bps / target.bandwidth_bps
    # a grid that does not fill the GPU runs at its SMs' speed, not the whole GPU's
    rsm = rc * (target.sms / src.sms)
    lo = np.minimum(np.minimum(rc, rsm) / slow_s, rb) / ACHIEVABLE_SPREAD
    hi = np.maximum(np.maximum(rc, rsm) * slow_t, rb) * ACHIEVABLE_SPREAD
    with np.errstate(invalid="ignore"):
        fits = np.nan_to_num(w_src.bytes, nan=np.inf) <= min(src.l2_bytes, target.l2_bytes)
    rl2 = src.l2_bandwidth_bps / target.l2_bandwidth_bps
    lo = np.where(fits, np.minimum(lo, rl2), lo)
    hi = np.where(fits, np.maximum(hi, rl2), hi)
    return lo, hi


#: A GEMM whose measured source time is more than this factor off its source model ran a kernel
#: that physics does not explain (a library's serial K loop where another GPU's splits K, a
#: fallback kernel): its measured time says nothing of what the same work costs elsewhere, so
#: the bracket does not hold it.
UNEXPLAINED_FACTOR = 3.0


def bracket_applies(w: Workload, flags: np.ndarray, t_src: np.ndarray | None = None,
                    model_src: np.ndarray | None = None) -> np.ndarray:
    """Kernels a prediction must keep inside :func:`ratio_bracket`: every kernel but a GEMM that
    the target's fit covers (the target calibrated, its shape cell in the fit data, its path
    unchanged: no extrapolation bit but an uncalibrated source's), whose fitted library behaviour
    (tile choice, split-K, under-filled waves) is measured and may reach past the physics of
    peaks: it is the target's model that predicts such a GEMM (the source's measured deviation
    carries over by the fitted transfer exponent only). GEMVs and small-M
    GEMMs are always held to it (no GEMM grid reaches their regime's physics from the fit). A
    GEMM (not a GEMV) whose measured source time (``t_src``) is more than :data:`UNEXPLAINED_FACTOR`
    off the source model's (``model_src``) is not: the library ran something physics does not
    describe."""
    held = ~w.is_gemm | ((flags & ~SOURCE_UNCALIBRATED) != 0) | streams_weights(w)
    if t_src is not None and model_src is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            off = t_src / model_src
        odd = np.isfinite(off) & ((off > UNEXPLAINED_FACTOR) | (off < 1.0 / UNEXPLAINED_FACTOR))
        held &= ~(w.is_gemm & odd & ~streams_weights(w))
    return held


def bracket_ns(t_src: np.ndarray, fixed_src: float, fixed_tgt: float, lo: np.ndarray, hi: np.ndarray,
               latency_ratios: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The least and most target time of each measured kernel: its fixed (launch or harness)
    time on the target plus its measured work (source time less the source's fixed time) x the
    ratio bracket of :func:`ratio_bracket`. A kernel whose work is under :data:`SHORT_KERNEL_US` is
    latency-bound: it may also land anywhere its source time x the fixed-time ratio or any of
    ``latency_ratios`` (the clock ratio, the DRAM latency ratio: :func:`latency_ratios`) takes it,
    x :data:`ACHIEVABLE_SPREAD`. NaN where the source time is unknown."""
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    low = fixed_tgt + work * lo
    high = fixed_tgt + work * hi
    # latency-bound: the work beyond the fixed (launch, harness) time is under a few microseconds
    short = np.isfinite(t_src) & (work < SHORT_KERNEL_US * 1e3)
    ratios = [*latency_ratios, *([fixed_tgt / fixed_src] if fixed_src > 0 else [])]
    if short.any() and ratios:
        low = np.where(short, np.minimum(low, t_src * min(ratios) / ACHIEVABLE_SPREAD), low)
        high = np.where(short, np.maximum(high, t_src * max(ratios) * ACHIEVABLE_SPREAD), high)
    unknown = ~np.isfinite(t_src) | (t_src <= 0)
    return np.where(unknown, np.nan, low), np.where(unknown, np.nan, high)


#: A memory-class kernel whose modelled streaming time (its bytes at the fitted bandwidth
#: fraction) is under this fraction of its measured work on the source is starved of parallelism.
STARVED_FRACTION = 0.5


def starved(w: Workload, inferred: np.ndarray, single: np.ndarray, t_src: np.ndarray,
            fixed_src: float, ms: KernelTimes) -> np.ndarray:
    """Kernels bound by what a few blocks keep in flight, not by DRAM: memory-class but a gather (an
    embedding's time follows its chain of dependent loads), one kernel per row (``single``), bytes
    known (not inferred from the time), memory-bound in the source model, :data:`SHORT_KERNEL_US` of
    work or more (shorter ones are latency-bound, :func:`bracket_ns`), and reaching under
    :data:`STARVED_FRACTION` of that model's streaming rate on the source (a
    grid narrower than the GPU, one block looping over a long row: a LayerNorm over 16 rows of 4 M
    elements runs at 4% of an A100's bandwidth and takes the same time on a T4)."""
    work = np.nan_to_num(t_src, nan=0.0) - fixed_src
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = ms.work_ns / work
    streaming = (ops.work_class(w.family) == ops.MEMORY_CLASS) & (w.family != ops.EMBEDDING)
    return (streaming & (inferred == 0) & (w.bytes > 0) & single & (work >= SHORT_KERNEL_US * 1e3)
            & np.isfinite(frac) & (frac < STARVED_FRACTION) & (ms.compute_ns < ms.memory_ns))


def starved_ns(w: Workload, t_src: np.ndarray, fixed_src: float, fixed_tgt: float, ms: KernelTimes,
               mt: KernelTimes, src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Target time of a :func:`starved` kernel: its streaming part as the target model has it, the
    rest of its measured work (what the blocks in flight could not hide) by the clock ratio x the
    ratio of whole waves its grid takes on each GPU (one SM's issue rate: a grid under one wave
    takes one on any GPU, however many SMs it has; a grid of many waves spreads over them). A grid
    of unknown size is taken to be under one wave on both (a harness row, a trace without launch
    shapes)."""
    rest = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src - ms.work_ns, 0.0)
    with np.errstate(invalid="ignore"):
        ws = np.maximum(np.ceil(np.nan_to_num(launch_waves(w, src), nan=1.0)), 1.0)
        wt = np.maximum(np.ceil(np.nan_to_num(launch_waves(w, target), nan=1.0)), 1.0)
    return fixed_tgt + mt.work_ns + rest * (src.clock_hz / target.clock_hz) * (wt / ws)


#: Host time PyTorch eager spends issuing each operator of a chain after the first (Python, dispatch
#: and launch): KernelBench's multi-operator rows that move almost nothing (a hinge loss over 1 KB:
#: four operators, 70-90 us a call against a one-operator floor of 25 us; cosine similarity, nine
#: operators, 140-205 us) spend about 15 us per extra operator, on every GPU.
CHAIN_ISSUE_US = 15.0
#: A chain is taken as device-bound on the source only when its measured work is this many times
#: the host's issue time (in between, the host may be what was timed).
CHAIN_DEVICE_MARGIN = 1.5
#: Steepness of the L2 hit fraction of a chain's intermediates against its working set over the
#: L2 capacity (:func:`l2_hit_fraction`).
L2_FIT_STEEPNESS = 4.0


def l2_hit_fraction(nbytes: np.ndarray, spec: GPUSpec) -> np.ndarray:
    """Fraction of a kernel chain's intermediate traffic served by L2: each kernel reads what the
    one before wrote, and that stays in L2 when one kernel's working set (about the chain's own
    inputs and outputs, ``nbytes``) fits: 1 / (1 + (set / L2)^4), half at a set the size of L2."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        h = 1.0 / (1.0 + (np.nan_to_num(nbytes, nan=np.inf) / spec.l2_bytes) ** L2_FIT_STEEPNESS)
    return np.where(np.isfinite(h), h, 0.0)


def chain_bandwidth(nbytes: np.ndarray, spec: GPUSpec) -> np.ndarray:
    """Bandwidth (bytes/s) a chain's intermediate traffic moves at: L2 for the part that hits
    (:func:`l2_hit_fraction`), DRAM for the rest."""
    h = l2_hit_fraction(nbytes, spec)
    return 1.0 / ((1.0 - h) / spec.bandwidth_bps + h / spec.l2_bandwidth_bps)


#: Most traffic a kernel of a chain moves, in passes over the chain's own inputs and outputs (an
#: elementwise kernel reads one or two operands of the chain's size and writes one): a device time
#: that implies more was not spent moving data (a scan's dependent steps, a loss's launches over a
#: few kilobytes).
CHAIN_MAX_PASSES = 4.0


def chained(w: Workload, inferred: np.ndarray, kernels: np.ndarray, t_src: np.ndarray,
            fixed_src: float, src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Rows that time a traffic-bound chain of memory-class kernels: ``kernels`` > 1 and bytes
    known (a harness timing an operator that dispatches several, like MinGPT's GELU), their bytes
    the chain's inputs and outputs only, so that its intermediates move through L2 or DRAM as they
    fit. The chain's measured work must be device time (over :data:`CHAIN_DEVICE_MARGIN` x the
    host's issue time of its extra operators) that its traffic explains: at the bandwidth of the
    level that holds its intermediates on the source (:func:`chain_bandwidth`), at most
    :data:`CHAIN_MAX_PASSES` passes over its bytes per kernel."""
    # a gather follows its chain of loads; a reduction's later kernels work on reduced data (a
    # loss, a scan): neither's time is passes over its bytes
    streaming = ((ops.work_class(w.family) == ops.MEMORY_CLASS) & (w.family != ops.EMBEDDING)
                 & (w.family != ops.REDUCE))
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    issue = np.maximum(kernels - 1, 0) * CHAIN_ISSUE_US * 1e3
    with np.errstate(invalid="ignore", divide="ignore"):
        passes = work * 1e-9 * chain_bandwidth(w.bytes, src) / w.bytes
        on_target = work * chain_bandwidth(w.bytes, src) / chain_bandwidth(w.bytes, target)
    return (streaming & (inferred == 0) & (w.bytes > 0) & (kernels > 1)
            & (np.minimum(work, on_target) >= CHAIN_DEVICE_MARGIN * issue) & np.isfinite(passes)
            & (passes <= CHAIN_MAX_PASSES * kernels))


def chain_ns(w: Workload, kernels: np.ndarray, t_src: np.ndarray, fixed_src: float, fixed_tgt: float,
             src: GPUSpec, target: GPUSpec) -> np.ndarray:
    """Target time of a :func:`chained` row: its measured work is the traffic of its kernels at the
    bandwidth of the level that held its intermediates on the source, moved at the target's
    (:func:`chain_bandwidth`), but no less than the host's issue time of its extra operators
    (:data:`CHAIN_ISSUE_US` each, the same on any GPU)."""
    work = np.maximum(np.nan_to_num(t_src, nan=0.0) - fixed_src, 0.0)
    issue = np.maximum(kernels - 1, 0) * CHAIN_ISSUE_US * 1e3
    ratio = chain_bandwidth(w.bytes, src) / chain_bandwidth(w.bytes, target)
    return fixed_tgt + np.maximum(issue, work * ratio)


#: Window kernels: each output gathers a window of inputs (a convolution's receptive field, a
#: pooling window), and the address arithmetic of those gathers runs on the CUDA cores whatever
#: path the multiply-adds take. Per byte moved it is a property of the kernel's kind
#: (:attr:`Calibration.window_simt`, FP32 FLOPs per byte), and it makes a third roof: the GPUs
#: with the most DRAM bandwidth per CUDA-core cycle hit it first. KernelBench's standard 2D
#: convolutions reach 28-40% of a T4's and an A100's bandwidth (64 FP32 lanes per SM; the T4 at
#: its sustained clock) but 53-67% of an A10's, A10G's and L40S's (128 lanes per SM); 3D pooling
#: 33% of an A100's and 82% of an L40S's.
WINDOW_KINDS: tuple[str, ...] = ("conv", "depthwise", "pool")
#: Codes of :func:`window_kinds` (index into :data:`WINDOW_KINDS` + 1; 0: not a window kernel).
NOT_WINDOW = 0


#: A pooling kernel's or operator's name (PyTorch's ``max_pool_forward_nchw``,
#: ``avg_pool2d_out_cuda_frame``, ``adaptive_avg_pool``..., KernelBench's ``Max_Pooling_2D``), not a
#: BERT ``pooler`` (a linear layer and its tanh).
_POOLING = re.compile(r"pooling|(max|avg|average)_?pool|adaptive\w*pool")


def window_kinds(w: Workload, names: np.ndarray) -> np.ndarray:
    """Per kernel: 1 + its index in :data:`WINDOW_KINDS`, 0 for kernels that gather no window.
    A convolution by op or name (:func:`convolutions`), ``depthwise`` where the name says so
    (one input channel per output: nothing to amortise the window over); a 1x1 (``pointwise``)
    convolution is a GEMM, no window; ``pool`` where a memory-class kernel's name says pool."""
    out = np.zeros(len(w), dtype=np.int8)
    if len(w) == 0:
        return out
    # names are read only where they can matter, each distinct one once (a million-kernel table
    # has a few hundred): convolutions among GEMM-family rows without GEMM dims, pooling among
    # memory-class rows
    conv = convolutions(w, names)
    idx = np.flatnonzero(conv)
    if len(idx):
        kind = {n: ("" if "pointwise" in low else "depthwise" if "depthwise" in low and "separable" not in low
                    else "conv") for n in set(names[idx].tolist()) for low in (str(n).lower(),)}
        out[idx] = [WINDOW_KINDS.index(kind[n]) + 1 if kind[n] else 0 for n in names[idx].tolist()]
    idx = np.flatnonzero((ops.work_class(w.family) == ops.MEMORY_CLASS) & ~conv)
    if len(idx):
        pools = {n for n in set(names[idx].tolist()) if _POOLING.search(str(n).lower())}
        if pools:
            hit = np.fromiter((n in pools for n in names[idx].tolist()), dtype=bool, count=len(idx))
            out[idx[hit]] = WINDOW_KINDS.index("pool") + 1
    return out


def window_flops_per_byte(kinds: np.ndarray, per_kind: dict[str, float]) -> np.ndarray:
    """FP32 FLOPs per byte of each kernel's window arithmetic (0 where none or not fitted)."""
    table = np.array([0.0, *(per_kind.get(k, 0.0) for k in WINDOW_KINDS)])
    return table[kinds]


def with_simt_roof(t: KernelTimes, w: Workload, flops_per_byte: np.ndarray, spec: GPUSpec,
                   params: ResolvedParams, cal: Calibration) -> KernelTimes:
    """``t`` with the window roof: ``flops_per_byte`` x bytes at the CUDA cores' FP32 rate (its
    fitted efficiency; a power-limited board's clock settling as for any long compute), where that
    exceeds the DRAM time (it is the memory side's issue rate, not more FLOPs to add)."""
    rate = matmul_simt_flops(spec, "fp32") * params.simt_eff
    simt = flops_per_byte * np.nan_to_num(w.bytes) / rate * 1e9
    simt = simt * clock_slowdown(simt, spec, cal.globals.clock_tau_ns, cal.globals.sustained_clock_scale)
    bound = simt > t.memory_ns
    if not bound.any():
        return t
    memory = np.where(bound, simt, t.memory_ns)
    work = np.where(bound, smooth_max(t.compute_ns, memory, cal.globals.softness), t.work_ns)
    return KernelTimes(compute_ns=t.compute_ns, memory_ns=memory, work_ns=work, fixed_ns=t.fixed_ns,
                       total_ns=t.fixed_ns + work, regime=t.regime)


def latency_ratios(src: GPUSpec, target: GPUSpec) -> tuple[float, float]:
    """Target / source time of a latency-bound kernel: the clock ratio (a dependent chain of
    instructions) and the DRAM latency ratio (a dependent chain of loads)."""
    return src.clock_hz / target.clock_hz, target.dram_latency_ns / src.dram_latency_ns


def never_launch_bound(regime: np.ndarray, times: KernelTimes, t_src: np.ndarray,
                       fixed_src: float) -> np.ndarray:
    """Regimes with ``launch`` replaced by compute/memory for kernels that ran more than
    :data:`LONG_KERNEL_LAUNCHES` launch overheads on the source."""
    with np.errstate(invalid="ignore"):
        long = np.isfinite(t_src) & (t_src > LONG_KERNEL_LAUNCHES * fixed_src)
    bound = np.where(times.compute_ns >= times.memory_ns, COMPUTE, MEMORY)
    return np.where((regime == LAUNCH) & long, bound, regime).astype(np.int8)


def _take(w: Workload, idx: np.ndarray) -> Workload:
    return Workload(**{f: getattr(w, f)[idx] for f in w.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class KernelTimes:
    """Model times (ns) of every kernel on one spec."""

    compute_ns: np.ndarray
    memory_ns: np.ndarray
    work_ns: np.ndarray
    fixed_ns: np.ndarray
    total_ns: np.ndarray
    regime: np.ndarray
    """Regime codes (see :data:`REGIMES`)."""


def kernel_times(
    w: Workload,
    spec: GPUSpec,
    params: ResolvedParams,
    cal: Calibration,
    fixed_ns: np.ndarray | float,
    tiles: tuple[np.ndarray, np.ndarray],
) -> KernelTimes:
    """Calibrated time of every kernel on a spec (see module doc)."""
    w = on_spec(w, spec)
    n = len(w)
    peak = peak_flops(w, spec)
    eff_c = np.where(w.tensor, params.tensor_eff, params.simt_eff)
    gemm = w.is_gemm
    ta, tb = tiles
    rate = peak * eff_c
    splits = split_k_factors(w, spec, ta, tb) if cal.globals.split_k else None
    tiled = gemm_compute_ns(w, spec, rate, ta, tb, cal.globals.min_tile_area, cal.globals.wave_quant, splits,
                            cal.globals.tile_reuse, cal.globals.tensor_tile_reuse, cal.globals.tile_latency,
                            cal.globals.warp_fill, params.simt_step * spec.dram_latency_ns)
    use_tiles = gemm & (ta > 0) & (tb > 0) & np.isfinite(tiled) & ~streams_weights(w)
    plain = w.flops / rate * 1e9
    compute = np.where(use_tiles, np.maximum(tiled, plain), plain)
    compute = compute * clock_slowdown(compute, spec, cal.globals.clock_tau_ns,
                                       cal.globals.sustained_clock_scale)
    with np.errstate(invalid="ignore"):
        tiles_n = w.batch * np.ceil(w.n / np.maximum(ta, 1)) * np.ceil(w.m / np.maximum(tb, 1))
    slots = spec.sms * cal.globals.blocks_per_sm
    bw_eff = family_bw_eff(w, params)
    if params.gemm_bw_eff is not None:  # GEMMs stream their operands (Globals.gemm_stream)
        bw_eff = np.where(gemm, params.gemm_bw_eff, bw_eff)
    memory = memory_ns(w, spec, bw_eff, cal.globals.l2_resident)
    work = smooth_max(compute, memory, cal.globals.softness)
    if cal.globals.launch_waves > 0:  # non-GEMMs with a launch shape run in whole waves
        quant = launch_wave_factor(w, spec, cal.globals.launch_waves)
        compute, memory, work = compute * quant, memory * quant, work * quant
    fixed = np.broadcast_to(np.asarray(fixed_ns, dtype=np.float64), (n,))
    if params.family_fixed:
        fixed = fixed * family_fixed_mult(w, params)
    total = fixed + work
    regime = np.where(compute >= memory, COMPUTE, MEMORY)
    with np.errstate(invalid="ignore"):
        latency = np.where(use_tiles, tiles_n < 0.5 * slots, work < 2.0 * spec.dram_latency_ns)
    regime = np.where(latency, LATENCY, regime)
    regime = np.where(fixed > work, LAUNCH, regime)
    return KernelTimes(compute_ns=compute, memory_ns=memory, work_ns=work, fixed_ns=fixed,
                       total_ns=total, regime=regime.astype(np.int8))

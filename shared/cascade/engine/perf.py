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

The modules beside it build on this one: :mod:`cascade.engine.extrapolation` (why a prediction
is extrapolated), :mod:`cascade.engine.convmath` (convolutions and window kernels as cuDNN runs
them on each GPU) and :mod:`cascade.engine.crossgpu` (what a measured time allows on another
GPU: the physical bracket, work inferred from the time, starved kernels, kernel chains).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascade import opfamilies
from cascade.calibration import BW_FAMILIES, STREAM_FAMILIES, Calibration, ResolvedParams
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


_LOW_PRECISION_CODES = np.array([d in LOW_PRECISION for d in DTYPES])


@dataclass(frozen=True)
class _SpecTables:
    """Per dtype code, what a spec's units do with it (read-only arrays)."""

    has: np.ndarray
    """the spec runs the dtype on some tensor cores (:func:`tensor_dtype_on`)"""
    swapped: np.ndarray
    """a low-precision dtype on other tensor cores than its own (:func:`software_fallback`)"""
    simt: np.ndarray
    matmul: np.ndarray
    tensor: np.ndarray


#: Tables of the specs seen lately, by object (a spec is frozen; the entry holds the spec itself,
#: so its id is not reused while cached). Built once per spec instead of on every call: a refit
#: predicts tens of thousands of small tables.
_TABLES: dict[int, tuple[GPUSpec, _SpecTables]] = {}
_TABLES_MAX = 256


def _tables(spec: GPUSpec) -> _SpecTables:
    hit = _TABLES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    on = [tensor_dtype_on(spec, d) for d in DTYPES]
    arrays = {
        "has": np.array([m != "" for m in on]),
        "swapped": np.array([d in LOW_PRECISION and m not in ("", _TENSOR_MATH.get(d, d)) for d, m in zip(DTYPES, on, strict=True)]),
        "simt": np.array([spec.simt_flops(d) for d in DTYPES], dtype=float),
        "matmul": np.array([matmul_simt_flops(spec, d) for d in DTYPES], dtype=float),
        "tensor": np.array([spec.tensor_flops(m) if m else 0.0 for m in on], dtype=float),
    }
    for a in arrays.values():
        a.flags.writeable = False
    tables = _SpecTables(**arrays)
    if len(_TABLES) >= _TABLES_MAX:
        _TABLES.clear()
    _TABLES[id(spec)] = (spec, tables)
    return tables


def software_fallback(w: Workload, spec: GPUSpec) -> np.ndarray:
    """Per kernel: a tensor-core kernel of a low-precision format ``spec`` has no units for, run
    on its BF16 / FP16 tensor cores instead (:func:`tensor_dtype_on`)."""
    return np.asarray(w.tensor & _tables(spec).swapped[w.dtype_code], dtype=bool)


def on_spec(w: Workload, spec: GPUSpec) -> Workload:
    """The workload as ``spec``'s units run it: a tensor-path kernel of a dtype the spec has no
    tensor cores for (FP16 on a P100, TF32 before Ampere) runs on the CUDA cores, with their
    tiles, efficiency and :func:`matmul_simt_flops` peak; a low-precision one (FP8, FP4) on its
    BF16 / FP16 tensor cores (:func:`tensor_dtype_on`). ``w`` itself where nothing changes."""
    moved = w.tensor & ~_tables(spec).has[w.dtype_code]
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
    t = _tables(spec)
    simt, matmul, tensor = t.simt, t.matmul, t.tensor
    code = w.dtype_code
    # attention over an FP8 cache runs no faster than over a BF16 one (llm-kernels: FP8 / BF16
    # prefill medians 1.04 on the B200, 1.12 on the H100): its BF16 units' rate
    low = _LOW_PRECISION_CODES[code] & (w.family == opfamilies.ATTENTION)
    half = spec.tensor_flops("bf16") or spec.tensor_flops("fp16")
    tensor_peak = np.where(low & (half > 0), half, tensor[code])
    return np.where(w.tensor, tensor_peak, np.where(w.family == opfamilies.GEMM, matmul[code], simt[code]))


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
            # every candidate in one call: the rows repeated once per candidate (elementwise
            # throughout, so each row's time is what a call of its own gives)
            cand = np.asarray(allowed, dtype=np.float64)
            n_sub = len(idx)
            every = _take(sub, np.tile(np.arange(n_sub), len(cand)))
            times = gemm_compute_ns(every, spec, np.tile(r, len(cand)), np.repeat(cand[:, 0], n_sub),
                                    np.repeat(cand[:, 1], n_sub), area,
                                    cal.globals.wave_quant, tile_reuse=cal.globals.tile_reuse,
                                    tensor_tile_reuse=cal.globals.tensor_tile_reuse,
                                    tile_latency=cal.globals.tile_latency,
                                    warp_fill=cal.globals.warp_fill).reshape(len(cand), n_sub)
            best = np.argmin(times, axis=0)
            ta[idx] = cand[best, 0]
            tb[idx] = cand[best, 1]
    return ta, tb


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
    for i, fam in enumerate(opfamilies.FAMILIES):
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
        if fam in opfamilies.FAMILIES and value != 1.0:
            mult[w.family == opfamilies.FAMILIES.index(fam)] = value
    return mult


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

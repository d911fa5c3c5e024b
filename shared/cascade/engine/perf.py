"""The calibrated kernel-time model every cross-GPU model builds on (vectorised).

time(spec) = fixed per-kernel time + smoothmax(compute time, memory time), where
compute time = tile-padded, under-filled GEMM FLOPs / (peak for dtype x achievable
fraction) and memory time = bytes / (DRAM bandwidth x achievable fraction for the
op family). Every term is >= its roofline counterpart, so the model never beats
max(flops / peak, bytes / bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cascade.calibration import BW_FAMILIES, Calibration, ResolvedParams
from cascade.engine import ops
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec

#: Regime labels (index = code).
REGIMES: tuple[str, ...] = ("compute", "memory", "latency", "launch")
COMPUTE, MEMORY, LATENCY, LAUNCH = range(4)


def peak_flops(w: Workload, spec: GPUSpec) -> np.ndarray:
    """Peak FLOP/s each kernel can reach on a spec (tensor path where it has one)."""
    out = np.empty(len(w))
    dtypes = w.dtype.astype(str)
    for d in np.unique(dtypes):
        sel = dtypes == d
        out[sel & w.tensor] = spec.peak_flops(str(d), True)
        out[sel & ~w.tensor] = spec.peak_flops(str(d), False)
    return out


def roofline_ns(w: Workload, spec: GPUSpec) -> np.ndarray:
    """max(flops / peak, bytes / bandwidth) in ns: the physical lower bound."""
    return np.maximum(w.flops / peak_flops(w, spec), w.bytes / spec.bandwidth_bps) * 1e9


def smooth_max(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """(a^p + b^p)^(1/p), computed without overflow; >= max(a, b)."""
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, safe * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def tile_key(tensor: bool, batched: bool) -> str:
    """Calibration key of the GEMM tile table."""
    return ("tensor" if tensor else "simt") + ("_batched" if batched else "")


def target_tiles(w: Workload, spec: GPUSpec, cal: Calibration, source: GPUSpec | None) -> tuple[np.ndarray, np.ndarray]:
    """GEMM tile per kernel on ``spec``: the named tile when the kernel ran on the same
    architecture, else the architecture's typical tile for the path (from calibration)."""
    ta = w.tile_a.copy()
    tb = w.tile_b.copy()
    keep_named = source is not None and source.arch == spec.arch
    batched = w.batch > 1
    for tensor in (False, True):
        for bat in (False, True):
            a, b = cal.tile(spec.arch, tile_key(tensor, bat))
            sel = (w.tensor == tensor) & (batched == bat)
            if keep_named:
                sel &= ta <= 0
            ta[sel] = a
            tb[sel] = b
    return ta, tb


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
    n = len(w)
    peak = peak_flops(w, spec)
    eff_c = np.where(w.tensor, params.tensor_eff, params.simt_eff)
    gemm = w.is_gemm
    ta, tb = tiles
    slots = spec.sms * cal.globals.blocks_per_sm
    with np.errstate(invalid="ignore"):
        tiles_n = w.batch * np.ceil(w.n / np.maximum(ta, 1)) * np.ceil(w.m / np.maximum(tb, 1))
        waves = np.maximum(tiles_n / slots, 1.0)
        padded = 2.0 * w.k * waves * slots * ta * tb
    use_tiles = gemm & (ta > 0) & (tb > 0) & np.isfinite(padded)
    flops_eff = np.where(use_tiles, np.maximum(padded, w.flops), w.flops)
    compute = flops_eff / (peak * eff_c) * 1e9
    bw_mult = np.ones(n)
    for i, fam in enumerate(ops.FAMILIES):
        if fam in BW_FAMILIES and params.family_bw.get(fam, 1.0) != 1.0:
            bw_mult[w.family == i] = params.family_bw[fam]
    bw_eff = np.minimum(params.bw_eff * bw_mult, 1.0)
    memory = w.bytes / (spec.bandwidth_bps * bw_eff) * 1e9
    work = smooth_max(compute, memory, cal.globals.softness)
    fixed = np.broadcast_to(np.asarray(fixed_ns, dtype=np.float64), (n,))
    total = fixed + work
    regime = np.where(compute >= memory, COMPUTE, MEMORY)
    with np.errstate(invalid="ignore"):
        latency = np.where(use_tiles, tiles_n < 0.5 * slots, work < 2.0 * spec.dram_latency_ns)
    regime = np.where(latency, LATENCY, regime)
    regime = np.where(fixed > work, LAUNCH, regime)
    return KernelTimes(compute_ns=compute, memory_ns=memory, work_ns=work, fixed_ns=fixed,
                       total_ns=total, regime=regime.astype(np.int8))

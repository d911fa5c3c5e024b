"""Why a kernel's prediction is extrapolated: the reasons (bits of a per-kernel mask), the
shape cells of the calibration's residual grids, and the flags a prediction starts from."""

from __future__ import annotations

import numpy as np

from cascade.calibration import Calibration
from cascade.calibration.accuracy import calibrated_in
from cascade.engine.perf import streams_weights, tile_key
from cascade.engine.workload import Workload
from cascade.gpus.spec import GPUSpec


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
    (4096, ("FP32 convolution on another GPU by the convolution campaign's size model blended with the engine's "
            "(cuDNN harness times per call; into a GPU left out of its fit: 16.8% mean, worst 19.4%)")),
)
(TARGET_UNCALIBRATED, SOURCE_UNCALIBRATED, SHAPE_OUTSIDE, BOUND_ONLY, NOT_SIMULATED,
 INFERRED_FROM_NAME, INFERRED_BLEND, TF32_CONV, OFF_TENSOR, WINDOW, UNSEEN_TILES, SOFTWARE_FALLBACK,
 CONV_SIZED) = (b for b, _ in EXTRAPOLATION_REASONS)
#: dtype of per-kernel extrapolation bits (every bit above fits).
FLAGS_DTYPE = np.int16


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

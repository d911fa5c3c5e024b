"""cuDNN's convolution algorithms: which one a kernel name says ran, and what each costs.

cuDNN runs one forward convolution as one of a few algorithms, each with its own kernels (names as
cuDNN 8 launches them, ``neusight-conv`` in the measured data):

* ``implicit_gemm``: ``implicit_convolve_sgemm`` (one kernel, the input gathered per tap);
* ``precomputed``: implicit GEMM over precomputed offsets (``cask_cudnn_infer::computeOffsetsKernel``
  then ``*_scudnn_128x64_relu_*``; ``precomputed_convolve_sgemm``);
* ``winograd_fused``: ``*_scudnn_winograd_128x128_*`` after ``generateWinogradTilesKernel``;
* ``winograd_nonfused``: ``winograd_nonfused::winogradForwardData4x4`` / ``Filter4x4`` /
  ``Output4x4`` around an SGEMM (F(4x4, 3x3): 36 products per 16 outputs where direct takes 144);
* ``fft``: ``fft2d_r2c`` / ``fft2d_c2r`` around a complex GEMM (``*_gcgemm_*``);
* ``im2col``: ``im2col4d_kernel`` then ``explicit_convolve_sgemm``;
* ``xmma``: CUTLASS / xmma implicit-GEMM convolutions (``sm80_xmma_fprop_implicit_gemm_*``), cuDNN
  v8 / v9 runtime-fused kernels;
* ``other``: a name that says none of these.

A row's cost on a GPU is its direct implicit-GEMM work (m, n, k = B H W, C_out, C_in R S) times
the algorithm's cost per direct FLOP (:class:`ConvAlgoModel`), fitted on the campaign.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from cascade.calibration.parameters import ConvSize

#: Algorithms a convolution's kernels can say (index = code).
CONV_ALGOS: tuple[str, ...] = ("implicit_gemm", "precomputed", "winograd_fused", "winograd_nonfused", "fft",
                               "im2col", "xmma", "other")
(IMPLICIT_GEMM, PRECOMPUTED, WINOGRAD_FUSED, WINOGRAD_NONFUSED, FFT, IM2COL, XMMA, OTHER) = range(len(CONV_ALGOS))

#: Multiplies per direct multiply (the arithmetic an algorithm saves, before its transforms and
#: efficiency): Winograd F(2x2, 3x3) 16 / 36 (2.25x fewer), F(4x4, 3x3) 36 / 144 (4x fewer).
ALGO_MULTIPLIES: dict[str, float] = {"winograd_fused": 16.0 / 36.0, "winograd_nonfused": 36.0 / 144.0}

# first rule that matches wins: names of the launch that carries a convolution's main work (or
# every kernel of the call, ';'-joined)
_RULES: tuple[tuple[int, re.Pattern[str]], ...] = (
    (FFT, re.compile(r"fft2d|fft_r2c|fft_c2r|gcgemm|flip_filter", re.IGNORECASE)),
    (WINOGRAD_NONFUSED, re.compile(r"winograd_nonfused|winogradforward(data|filter|output)", re.IGNORECASE)),
    (WINOGRAD_FUSED, re.compile(r"winograd", re.IGNORECASE)),
    (IM2COL, re.compile(r"im2col|explicit_convolve", re.IGNORECASE)),
    (PRECOMPUTED, re.compile(r"precomputed_convolve|computeoffsets|scudnn|kern_precompute", re.IGNORECASE)),
    (IMPLICIT_GEMM, re.compile(r"implicit_convolve", re.IGNORECASE)),
    (XMMA, re.compile(r"xmma|implicit_gemm|cutlass.*(fprop|conv)|conv.*fprop|runtime_fusion|fusion", re.IGNORECASE)),
)
#: A plain SGEMM launched by a convolution operator: cuDNN's non-fused Winograd runs its product
#: stage as one (the transforms are kernels of their own: a trace has them as separate rows).
_PLAIN_SGEMM = re.compile(r"(maxwell|volta|turing|ampere|ada|hopper|sm\d+)_sgemm", re.IGNORECASE)


def algorithm_of(names: str) -> int:
    """The :data:`CONV_ALGOS` code a convolution's kernel name (or ';'-joined names of every kernel
    of the call) says; a plain cuBLAS-style SGEMM alone is the product stage of non-fused
    Winograd; ``other`` where nothing matches."""
    for code, rule in _RULES:
        if rule.search(names):
            return code
    if _PLAIN_SGEMM.search(names):
        return WINOGRAD_NONFUSED
    return OTHER


def algorithms(names: np.ndarray) -> np.ndarray:
    """:func:`algorithm_of` of every row (each distinct name read once), int8 codes."""
    if len(names) == 0:
        return np.zeros(0, dtype=np.int8)
    # each distinct name read once, through a dict: a fixed-width string array of ';'-joined
    # kernel lists is as wide as the longest (a second to sort 5,000 of them)
    seen: dict[str, int] = {}
    return np.fromiter((seen[n] if n in seen else seen.setdefault(n, algorithm_of(n))
                        for n in map(str, np.asarray(names, dtype=object).tolist())), dtype=np.int8, count=len(names))


def shape_cells(m: np.ndarray, n: np.ndarray, k: np.ndarray, width: float) -> np.ndarray:
    """Cell key ``i,j,l`` of each implicit GEMM: log2 of m, n, k in cells of ``width`` octaves."""
    with np.errstate(invalid="ignore", divide="ignore"):
        idx = [np.floor(np.log2(np.maximum(np.nan_to_num(d, nan=1.0), 1.0)) / width).astype(np.int64)
               for d in (m, n, k)]
    return np.asarray([f"{a},{b},{c}" for a, b, c in zip(*(i.tolist() for i in idx), strict=True)], dtype=object)


def source_cost(codes: np.ndarray, cost: dict[str, float]) -> np.ndarray:
    """Cost per direct-GEMM time of the algorithm each row ran (1 where the fit has none)."""
    table = np.array([cost.get(a, 1.0) for a in CONV_ALGOS])
    return table[codes]


def expected_cost(cells: np.ndarray, arch: str, choice: dict[str, dict[str, float]],
                  cost: dict[str, float]) -> np.ndarray:
    """Cost per direct-GEMM time a GPU of ``arch`` is expected to pay for each shape cell: the mean
    log cost of what that architecture's cuDNN ran there, else of what every fitted GPU ran there,
    else the median of every algorithm's cost."""
    own = choice.get(arch, {})
    pooled = choice.get("*", {})
    fallback = float(np.median(np.log(list(cost.values())))) if cost else 0.0
    logs = np.fromiter((own.get(c, pooled.get(c, fallback)) for c in cells.tolist()), dtype=np.float64,
                       count=len(cells))
    return np.exp(logs)


#: Exponent of the smooth maximum of a convolution's compute and memory times in the size model.
SIZE_SMOOTH = 4.0


def size_log_ns(m: np.ndarray, n: np.ndarray, k: np.ndarray, nbytes: np.ndarray, *, sms: float,
                fp32_flops: float, bandwidth: float, floor_ns: float, eff: float, knee_flops: float,
                bw_eff: float) -> np.ndarray:
    """Log of an FP32 convolution's time (ns) on a GPU from its direct implicit GEMM (m, n, k),
    its bytes, and the GPU's SMs, FP32 peak (FLOP/s) and DRAM bandwidth (bytes/s): a floor plus the
    smooth maximum of the FLOPs at ``eff`` of the peak, filled as work per SM over work per SM +
    ``knee_flops``, and the bytes at ``bw_eff`` of the bandwidth."""
    work = 2.0 * np.asarray(m, dtype=np.float64) * np.asarray(n, dtype=np.float64) * np.asarray(k, dtype=np.float64)
    per_sm = work / sms
    fill = per_sm / (per_sm + knee_flops)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = work / (fp32_flops * eff * fill)
    memory = np.asarray(nbytes, dtype=np.float64) / (bandwidth * bw_eff)
    both = (np.nan_to_num(compute) ** SIZE_SMOOTH + memory ** SIZE_SMOOTH) ** (1.0 / SIZE_SMOOTH)
    return np.log(floor_ns + 1e9 * both)


def cell_weights(gpu: str, gpu_sms: float, fit: ConvSize) -> dict[str, float]:
    """The weight of each fitted GPU's cell table for ``gpu``: its own alone where it was fitted,
    else exp(-|ln(SM ratio)| / scale) (equal where ``scale`` is None)."""
    if gpu in fit.cells:
        return {gpu: 1.0}
    if fit.scale is None:
        return {g: 1.0 for g in fit.cells}
    return {g: float(np.exp(-abs(np.log(fit.sms[g] / gpu_sms)) / fit.scale)) for g in fit.cells}


def cell_log(cells: np.ndarray, weights: dict[str, float], fit: ConvSize) -> np.ndarray:
    """Per shape cell, the weighted mean log residual of the tables that have it (0 where none)."""
    num = np.zeros(len(cells))
    den = np.zeros(len(cells))
    keys = cells.tolist()
    for g, wt in weights.items():
        table = fit.cells[g]
        have = np.fromiter((c in table for c in keys), dtype=bool, count=len(keys))
        vals = np.fromiter((table.get(c, 0.0) for c in keys), dtype=np.float64, count=len(keys))
        num += wt * vals * have
        den += wt * have
    return np.where(den > 0, num / np.maximum(den, 1e-300), 0.0)


def size_model_log_ns(m: np.ndarray, n: np.ndarray, k: np.ndarray, nbytes: np.ndarray, gpu: str, *, sms: float,
                      fp32_flops: float, bandwidth: float, fit: ConvSize) -> np.ndarray:
    """:func:`size_log_ns` plus the GPU's shape-cell residual (:func:`cell_weights`)."""
    base = size_log_ns(m, n, k, nbytes, sms=sms, fp32_flops=fp32_flops, bandwidth=bandwidth,
                       floor_ns=fit.floor_ns, eff=fit.eff, knee_flops=fit.knee_flops, bw_eff=fit.bw_eff)
    cells = shape_cells(np.asarray(m, dtype=float), np.asarray(n, dtype=float), np.asarray(k, dtype=float), fit.width)
    return base + cell_log(cells, cell_weights(gpu, sms, fit), fit)

"""The parameters a calibration holds: per GPU spec (:class:`SpecParams`), shared by every GPU
(:class:`Globals`), transfer exponents, shape-residual grids, cuDNN's convolution algorithms,
and the parameters in effect for one spec once resolved (:class:`ResolvedParams`)."""

from __future__ import annotations

import msgspec
import numpy as np

#: Op families whose bandwidth efficiency may differ from plain streaming kernels.
BW_FAMILIES: tuple[str, ...] = ("norm", "embedding", "elementwise", "softmax", "reduce", "other")
#: Families whose kernels stream their bytes once through DRAM (what ``stream_bw_eff`` applies to).
STREAM_FAMILIES: tuple[str, ...] = ("norm", "embedding", "elementwise", "softmax", "reduce")


#: Architecture -> the cuBLAS SGEMM (FP32 SIMT) kernel generation it runs: Turing runs
#: ``volta_sgemm_*`` kernels (NeuSight's T4 rows), Ada and Hopper the ``ampere_sgemm_*`` ones,
#: Pascal ``maxwell_sgemm_*``.
SIMT_KERNEL_FAMILY: dict[str, str] = {
    "pascal": "maxwell", "volta": "volta", "turing": "volta",
    "ampere": "ampere", "ada": "ampere", "hopper": "ampere",
}


class SpecParams(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Fitted parameters of one GPU spec; ``None`` = not fitted (fall back)."""

    simt_eff: float | None = None
    """Achievable fraction of the SIMT peak (large, well-shaped GEMMs)."""
    tensor_eff: float | None = None
    """Achievable fraction of the dense tensor-core peak."""
    bw_eff: float | None = None
    """Achievable fraction of DRAM bandwidth for streaming kernels."""
    family_bw: dict[str, float] = {}
    """Multiplier on ``bw_eff`` per op family (norm, embedding, ...)."""
    simt_step: float | None = None
    """Least time of each K step (8 deep) of a SIMT GEMM tile on its SM, in the spec's DRAM
    latencies, however few tiles share the SM: under-filled SGEMM grids are latency bound
    (``cascade calibrate --simt-step``; the least-time tile choice does not weigh it)."""
    family_fixed: dict[str, float] = {}
    """Multiplier on the fixed per-kernel time per op family (norm, embedding, elementwise):
    a small kernel's time is its launch plus a dependent chain that differs by kernel kind (a
    block reduction and its barrier in a norm, one load-store in a pointwise op), and the chains
    scale differently between GPUs than the launch does."""


def measurement_context(measurement: str | None) -> str | None:
    """The context a measurement kind belongs to: ``neusight-bmm`` -> ``neusight``."""
    return measurement.split("-", 1)[0] if measurement else None


class Globals(msgspec.Struct, frozen=True, kw_only=True):
    """Parameters shared by every GPU."""

    softness: float = 3.0
    """Exponent p of the smooth maximum (t_c^p + t_m^p)^(1/p) of compute and memory time."""
    alpha_gemm: float = 1.0
    """How much of a GEMM's measured deviation from the model carries to another GPU (0..1),
    for calibrations without per-context ``transfer`` exponents."""
    alpha_other: float = 1.0
    """The same for non-GEMM kernels."""
    blocks_per_sm: float = 1.0
    """Concurrent GEMM tiles per SM below which a GEMM counts as latency bound (x 0.5)."""
    min_tile_area: float = 4096.0
    """A GEMM tile smaller than this many outputs takes as long as one of this size."""
    wave_quant: float = 0.0
    """0: GEMM tiles spread over SMs as fractional waves; 1: the tail wave costs a whole wave."""
    split_k: float = 0.0
    """1: GEMMs split their K loop (:func:`cascade.engine.perf.split_k_factors`); 0: never."""
    clock_tau_ns: float = 1.0e6
    """Compute time (at boost) at which a power-limited GPU's clock sits halfway between boost
    and its sustained clock (:func:`cascade.engine.perf.clock_slowdown`)."""
    l2_resident: float = 0.0
    """Share of the L2 cache a kernel's DRAM traffic finds resident (0: none). The measured
    data rerun each operator back to back (Vidur's profiler, NeuSight's harness), so an
    operator whose bytes fit in L2 is served from it at L2 bandwidth: up to this share of the
    L2 capacity moves at :attr:`GPUSpec.l2_bandwidth_bps` instead of DRAM bandwidth
    (:func:`cascade.engine.perf.memory_ns`)."""
    tile_reuse: float = 0.0
    """Operand traffic of a SIMT GEMM tile per FLOP, in tile-edge units: a ta x tb tile's compute
    time is x (1 + tile_reuse x (ta + tb) / (ta x tb)) (:func:`cascade.engine.perf.tile_reuse_factor`;
    0: every tile is equally efficient per FLOP, as calibrations before it assumed)."""
    tensor_tile_reuse: float = 0.0
    """The same operand-traffic cost for tensor-core GEMM tiles, as a multiple (kappa) of the
    architecture's MMA feed ratio (:func:`cascade.engine.perf.mma_feed_ratio`: the tensor
    multiply-adds per clock each shared-memory element read must feed, 16 on the A100, 30 on
    the H100): an MMA tile reads its A and B fragments from shared memory every K step, so a
    ta x tb tile's time is x (1 + kappa x ratio x (ta + tb) / (ta x tb)) and a small tile runs
    further below the tensor peak on GPUs whose tensor cores outrun their shared memory more
    (0: tensor tiles equally efficient, as calibrations before it assumed)."""
    tile_latency: float = 0.0
    """Exposed start of each wave of tensor-core GEMM tiles (filling the operand pipeline before
    the first MMA, writing the tile out after the last), in units of the spec's DRAM latency: a
    wave takes ``tile_latency x dram_latency_ns`` longer than its multiply-adds, which shows on
    short-K GEMMs, where a tile's K loop is short (0: none, calibrations before it)."""
    warp_fill: float = 0.0
    """1: a SIMT GEMM tile computed by fewer warps than the SM has warp schedulers (cuBLAS's
    64-thread 64x64 SGEMM tile: 2 warps, 4 schedulers) runs at warps / schedulers of its SM's
    rate while it is alone there, so an under-filled grid of such tiles takes as long as
    ``schedulers / warps`` of them per SM (:func:`cascade.engine.perf.tile_warp_fill`; not
    fitted); 0: a lone tile uses its whole SM (calibrations before it)."""
    launch_waves: float = 0.0
    """Wave quantisation of kernels other than GEMMs whose launch shape is known (grid and
    block size): ``W`` = blocks / (SMs x blocks resident per SM by threads), and from one wave
    on the kernel's work time is x (W + launch_waves x (ceil(W) - W)) / W
    (:func:`cascade.engine.perf.launch_wave_factor`): at 1 a partial tail wave costs a whole
    one, as for vLLM's one-block-per-token RMSNorm, whose time steps at every 2 x SMs tokens;
    a grid under one wave is left as it was; 0: off (calibrations before it)."""
    sustained_clock_scale: float = 1.0
    """Power-limited boards' sustained clock under heavy load as a multiple of the spec's
    ``sustained_clock_mhz`` (a datasheet base clock, the floor NVIDIA guarantees at TDP;
    capped at the boost clock)."""
    gemm_stream: float = 0.0
    """GEMMs' operand streaming in per-kernel (``kernel``-context) times: a GEMM's DRAM traffic
    moves at this multiple of the spec's achievable fraction (``efficiency.bandwidth``, one long
    sequential read) instead of the fitted ``bw_eff``, which in that context the GEMMs share with
    the small elementwise and norm kernels and which the cross-GPU ratio fit does not pin on
    memory-bound GEMMs. Harness contexts (``neusight``: GEMMs only, so ``bw_eff`` is theirs)
    keep ``bw_eff``. 0: ``bw_eff`` everywhere (calibrations that predate it)."""


class Transfer(msgspec.Struct, frozen=True, kw_only=True):
    """How much of a kernel's measured deviation from the model on the source carries to a
    target of another architecture (0: none, the target model alone; 1: all of it), for one
    measurement context. The deviation is part library (tile choices, which differ between
    architectures) and part measurement (a harness's overheads, memory behaviour both GPUs
    share): how the two mix depends on how the times were measured."""

    gemm: float = 1.0
    """A compute-bound GEMM."""
    gemm_memory: float = 1.0
    """A memory-bound GEMM (blended with ``gemm`` by the source model's compute share)."""
    other: float = 1.0
    """Every other kernel (1 where the context's data had none: carry the deviation)."""
    conv: float | None = None
    """A convolution (its FLOPs known, no GEMM dims: cuDNN picks each GPU's own algorithm, so only
    part of its deviation is the operator's); None: as ``other``."""


class ResidualTable(msgspec.Struct, frozen=True, kw_only=True):
    """A calibrated GPU's remaining cross-architecture GEMM error as a function of shape: the
    median log(measured / predicted) of the fit rows in each cell of a grid over
    (dtype, tensor path, log2 batch, log2 M, log2 N, log2 K) (cells of ``width`` octaves,
    at least ``min_rows`` rows each). Keys are :func:`cascade.engine.extrapolation.residual_cells`."""

    width: float = 2.0
    min_rows: int = 5
    keys: list[int] = []
    """Sorted cell keys."""
    values: list[float] = []
    """Median log-ratio per cell (same order)."""
    rows: list[int] = []
    """Fit rows per cell."""

    def _find(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``keys``, whether that key is the cell) per cell key."""
        keys = np.asarray(self.keys, dtype=np.int64)
        idx = np.clip(np.searchsorted(keys, cells), 0, len(keys) - 1)
        return idx, keys[idx] == cells

    def lookup(self, cells: np.ndarray) -> np.ndarray:
        """Log-ratio per cell key (0 where the grid has no such cell)."""
        if not self.keys:
            return np.zeros(len(cells))
        idx, found = self._find(cells)
        return np.where(found, np.asarray(self.values)[idx], 0.0)

    def covers(self, cells: np.ndarray) -> np.ndarray:
        """Per cell key: whether the grid has that cell (enough fit rows there)."""
        if not self.keys:
            return np.zeros(len(cells), dtype=bool)
        return self._find(cells)[1]


class ConvSize(msgspec.Struct, frozen=True, kw_only=True):
    """An FP32 convolution's time on any GPU from its shape and the GPU's FP32 peak, SM count and
    DRAM bandwidth, fitted on a convolution campaign (:func:`cascade.fitting.conv.fit_conv_size`;
    :func:`cascade.engine.convalgo.size_log_ns`): ``floor_ns`` + the smooth maximum of the direct
    implicit GEMM's FLOPs at ``eff`` of the FP32 peak, filled as work per SM over work per SM +
    ``knee_flops``, and its bytes at ``bw_eff`` of the bandwidth; then each fitted GPU's mean log
    residual per shape cell (its algorithm choices and tile fits), a GPU not fitted taking the
    fitted GPUs' tables weighted by closeness of SM count."""

    floor_ns: float
    eff: float
    knee_flops: float
    bw_eff: float
    width: float = 1.0
    """Octaves per shape cell (log2 m, n, k) of ``cells``."""
    cells: dict[str, dict[str, float]] = {}
    """Fitted GPU (spec id) -> shape cell -> mean log residual of its campaign times."""
    sms: dict[str, int] = {}
    """Fitted GPU -> its SM count (the weights' distance)."""
    scale: float | None = None
    """A GPU not fitted weights a fitted GPU's table by exp(-|ln(SM ratio)| / scale); None: equally."""
    beta: float = 0.5
    """Share of the source's measured deviation from this model that carries to the target."""
    blend: float = 1.0
    """Share of this model in the geometric mean with the engine's algorithm-cost prediction (1: this
    model alone; chosen by leaving each training GPU out in turn)."""
    measurement: str = "neusight-conv"
    """The kind of time it was fitted on (a harness's time per call: its floor is the harness's);
    only times of that kind are predicted by it."""


class ConvAlgos(msgspec.Struct, frozen=True, kw_only=True):
    """cuDNN's convolution algorithms as fitted on a convolution campaign (``neusight-conv``,
    :func:`cascade.fitting.conv.fit_conv_algos`): what each costs and which each architecture picks."""

    cost: dict[str, float] = {}
    """Algorithm (:data:`cascade.engine.convalgo.CONV_ALGOS`) -> its time per the model's time of the
    direct implicit GEMM (m, n, k = B H W, C_out, C_in R S) on the same GPU: Winograd's fewer
    multiplies and its transforms, FFT's, a precomputed-offset kernel's efficiency."""
    choice: dict[str, dict[str, float]] = {}
    """Architecture (``*``: every fitted GPU) -> implicit-GEMM shape cell (log2 m, n, k in cells of
    ``width`` octaves, ``i,j,l``) -> mean log cost of the algorithms that architecture's cuDNN ran
    for shapes of the cell: the cost a target of that architecture is expected to pay."""
    width: float = 1.0
    """Octaves per cell of ``choice``."""
    alpha: float = 1.0
    """How much of a convolution's measured deviation from its algorithm's cost on the source
    carries to another GPU (1: all of it)."""
    gpus: list[str] = []
    """Spec ids the fit was made on."""
    size: ConvSize | None = None
    """The size model (None: the algorithm costs on the engine's direct-GEMM model alone). Where
    fitted, an FP32 convolution with shapes moved between SM designs is predicted by it."""


class ResolvedParams(msgspec.Struct, frozen=True, kw_only=True):
    """Parameters in effect for one GPU spec."""

    simt_eff: float
    tensor_eff: float
    bw_eff: float
    family_bw: dict[str, float]
    calibrated: bool
    family_fixed: dict[str, float] = {}
    """Multiplier on the fixed per-kernel time per op family (absent: 1)."""
    simt_step: float = 0.0
    """Least time per K step of a SIMT GEMM tile, in DRAM latencies (0: none)."""
    gemm_bw_eff: float | None = None
    """Achievable DRAM fraction of GEMMs' operand streaming (None: ``bw_eff``; see
    :attr:`Globals.gemm_stream`)."""
    stream_bw_eff: float | None = None
    """Achievable DRAM fraction of the streaming kernels (elementwise, norms, softmax,
    reductions, gathers: :data:`STREAM_FAMILIES`) where the measurement context's fits saw none
    (a harness's GEMM-only data fits ``bw_eff`` to GEMMs' operand traffic; a context nothing
    was fitted in, such as a prediction from the work alone): the spec's
    ``efficiency.bandwidth``, one long sequential read (None: ``bw_eff``)."""

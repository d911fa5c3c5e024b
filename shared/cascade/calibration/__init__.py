"""Fitted model parameters, stored as JSON data with provenance.

``default.json`` is produced by ``cascade calibrate --data ../shared/data/measured``
(see :mod:`cascade.fitting.fit`). Parameters are few and physical: per GPU the
achievable fraction of SIMT / tensor peak and of DRAM bandwidth (with a
multiplier per op family), the fixed per-kernel time of each measurement kind,
and per architecture the GEMM tile its libraries typically pick.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import msgspec
import numpy as np

from cascade.errors import ConfigError
from cascade.gpus.spec import GPUSpec

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
    at least ``min_rows`` rows each). Keys are :func:`cascade.engine.perf.residual_cells`."""

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


class Calibration(msgspec.Struct, frozen=True, kw_only=True):
    """A complete calibration: parameters plus where they came from."""

    id: str = "uncalibrated"
    version: str = "0"
    created: str = ""
    command: str = ""
    """Command that reproduces this file."""
    data_files: dict[str, str] = {}
    """Data file (relative path) -> sha256 of its content."""
    globals: Globals = Globals()
    specs: dict[str, SpecParams] = {}
    """Spec id -> fitted parameters."""
    floors_ns: dict[str, dict[str, float]] = {}
    """Measurement kind (``kernel``, ``neusight``...) -> spec id -> fixed per-kernel time, ns."""
    tiles: dict[str, dict[str, list[int]]] = {}
    """arch -> path key (``simt``, ``simt_batched``, ``tensor``, ...) -> the GEMM tile its
    library typically picks; [0, 0] = the candidate tile with the least modelled time."""
    metrics: dict[str, object] = {}
    """Accuracy measured when fitting (held-out and in-sample)."""
    contexts: dict[str, list[str]] = {}
    """Measurement context (``kernel``: per-kernel device times as in traces and Vidur;
    ``neusight``: a benchmark harness's per-call latency) -> spec ids fitted on data of that
    context. Empty in calibrations that predate it (every fit then serves every context)."""
    tile_menus: dict[str, dict[str, list[list[int]]]] = {}
    """arch -> path key -> the GEMM tiles its library's kernels were seen to use in the data
    (each on at least 5% of that path's calls): the choices of a ``[-1, 0]`` tile policy."""
    transfer: dict[str, Transfer] = {}
    """Measurement context -> transfer exponents fitted on data of that context (see
    :meth:`transfer_for`)."""
    window_simt: dict[str, float] = {}
    """Window kernel kind (:data:`cascade.engine.perf.WINDOW_KINDS`: ``conv``, ``depthwise``,
    ``pool``) -> FP32 FLOPs per byte its address arithmetic costs on the CUDA cores, a kernel
    property fitted on KernelBench (``cascade validate --e2e --fit-transfer``): a third roof beside
    the counted FLOPs and the DRAM traffic (:func:`cascade.engine.perf.with_simt_roof`). Empty:
    none (calibrations that predate it)."""
    conv_algos: ConvAlgos | None = None
    """cuDNN's convolution algorithms, their costs and each architecture's choice by shape (None:
    none fitted; convolutions with shapes then run as their direct implicit GEMM everywhere)."""
    residuals: dict[str, dict[str, ResidualTable]] = {}
    """Measurement kind (``neusight-bmm``, ``kernel``...) -> target spec id -> the GEMM error
    left on that target when predicted from another architecture, by shape (applied to such
    predictions: :class:`cascade.engine.models.ScaledModel`)."""
    defaults: dict[str, dict[str, float]] = {}
    """Spec id -> the spec file's default efficiencies (``simt_eff``, ``tensor_eff``,
    ``bw_eff``) when fitted: GPUs without a fit get their own default x the median
    fit / default ratio."""

    def digest(self) -> str:
        """Short content hash (provenance of predictions)."""
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()[:16]

    # ---- parameter resolution -----------------------------------------------------
    def _ratio(self, spec: GPUSpec, field: str, archs: dict[str, str], among: set[str] | None) -> float | None:
        """Median fit / default ratio of the fitted GPUs (of ``among`` if given) of the spec's
        architecture, else of all of them; None when no fitted GPU has the field."""
        ratios_arch: list[float] = []
        ratios_all: list[float] = []
        for sid, p in self.specs.items():
            if among is not None and sid not in among:
                continue
            v = getattr(p, field)
            d = self.defaults.get(sid, {}).get(field)
            if v is None or not d:
                continue
            ratios_all.append(float(v) / d)
            if archs.get(sid) == spec.arch:
                ratios_arch.append(float(v) / d)
        ratios = ratios_arch or ratios_all
        return float(statistics.median(ratios)) if ratios else None

    def _fallback(self, spec: GPUSpec, field: str, default: float, archs: dict[str, str],
                  context: str | None = None) -> float:
        """A spec's own fitted value; else its physical default (spec file) times the median
        ratio fit / default of the fitted GPUs of its architecture, else of every fitted GPU
        (the calibration says how far the physical defaults are off, not what a GPU it has
        never seen achieves). Needs ``defaults`` (spec id -> default) to form ratios; without
        it the median fit of the architecture is used.

        With a measurement ``context`` the calibration has fitted GPUs in (``contexts``), a fit
        made in that context comes first: the spec's own, else the ratio of that context's
        fitted GPUs; a fit from another context (a harness that achieves a different fraction
        of the same hardware) only after that."""
        own = self.specs.get(spec.id)
        value = getattr(own, field) if own else None
        among = set(self.contexts.get(context, ())) if context else set()
        if value is not None and (not among or spec.id in among):
            return float(value)
        if among:
            ratio = self._ratio(spec, field, archs, among)
            if ratio is not None:
                return float(min(default * ratio, 1.0))
        if value is not None:
            return float(value)
        ratio = self._ratio(spec, field, archs, None)
        if ratio is not None:
            return float(min(default * ratio, 1.0))
        same_arch = [getattr(p, field) for sid, p in self.specs.items()
                     if archs.get(sid) == spec.arch and getattr(p, field) is not None]
        if same_arch:
            return float(statistics.median(same_arch))
        return default

    def _family_bw(self, spec: GPUSpec, fam: str, archs: dict[str, str], context: str | None) -> float:
        """A family's bandwidth multiplier, in :meth:`_fallback`'s order: the spec's own fit
        from this context, the median of this context's fits (same arch first), the spec's
        own fit from another context, the median of every fit; else 1."""
        own = self.specs.get(spec.id)
        mine = own.family_bw.get(fam) if own else None
        among = set(self.contexts.get(context, ())) if context else set()

        def median(pool: set[str] | None) -> float | None:
            fits = {sid: p.family_bw[fam] for sid, p in self.specs.items()
                    if fam in p.family_bw and (pool is None or sid in pool)}
            vals = [v for sid, v in fits.items() if archs.get(sid) == spec.arch] or list(fits.values())
            return float(statistics.median(vals)) if vals else None

        if mine is not None and (not among or spec.id in among):
            return mine
        found = median(among) if among else None
        if found is None:
            found = mine if mine is not None else median(None)
        return found if found is not None else 1.0

    def _streams_fitted(self, context: str | None) -> bool:
        """Whether a measurement context's fits saw streaming kernels (its GPUs carry per-family
        bandwidth multipliers); a context with no fitted GPU, or none, did not."""
        ids = self.contexts.get(context, []) if context else []
        return any(self.specs[s].family_bw for s in ids if s in self.specs)

    def params_for(self, spec: GPUSpec, archs: dict[str, str] | None = None,
                   context: str | None = None) -> ResolvedParams:
        """Parameters for a spec: its own fit, else the median fit of its architecture, else the
        spec file's default efficiencies. ``archs`` maps calibrated spec ids to their arch;
        ``context`` is the measurement kind the times come from (``kernel``, ``neusight``:
        see :meth:`_fallback`)."""
        archs = archs if archs is not None else _known_archs()
        context = measurement_context(context)
        family_bw = {fam: self._family_bw(spec, fam, archs, context) for fam in BW_FAMILIES}
        own = self.specs.get(spec.id)
        among = set(self.contexts.get(context, ())) if context else set()
        # the fixed time's per-family shape is the GPU's own measurement (never borrowed: an
        # uncalibrated GPU keeps one fixed time for every family)
        family_fixed = dict(own.family_fixed) if own and (not among or spec.id in among) else {}
        # a context no fit was made in (``device``: a prediction from the work alone) takes
        # the spec's physical fractions for every stream of bytes: fitted fractions belong to
        # the harness and kernels they were fitted on, and borrowing them by GPU made the
        # same silicon with more bandwidth slower (A100 80GB vs 40GB)
        unfitted = bool(self.contexts) and context is not None and context not in self.contexts
        stream = self.globals.gemm_stream
        gemm_bw = (min(spec.efficiency.bandwidth * stream, 1.0)
                   if stream > 0 and (context in (None, "kernel") or unfitted) else None)
        # a GEMM-only context's bw_eff is the GEMMs' operand traffic: streaming kernels run at
        # the spec's achievable fraction unless that context's fits saw them (no context: this
        # GPU's own fits); a calibration that names no contexts cannot say: bw_eff throughout
        saw_streams = (self._streams_fitted(context) if context is not None else
                       any(self._streams_fitted(c) for c, ids in self.contexts.items() if spec.id in ids))
        stream_bw = None if not self.contexts or saw_streams else float(spec.efficiency.bandwidth)
        steps = [p.simt_step for sid, p in self.specs.items() if p.simt_step is not None
                 and (not among or sid in among)]
        step = (own.simt_step if own is not None and own.simt_step is not None and (not among or spec.id in among)
                else (statistics.median(steps) if steps else 0.0))
        return ResolvedParams(
            simt_step=float(step),
            gemm_bw_eff=gemm_bw,
            stream_bw_eff=stream_bw,
            simt_eff=self._fallback(spec, "simt_eff", spec.efficiency.simt, archs, context),
            tensor_eff=self._fallback(spec, "tensor_eff", spec.efficiency.tensor, archs, context),
            bw_eff=(float(spec.efficiency.bandwidth) if unfitted
                    else self._fallback(spec, "bw_eff", spec.efficiency.bandwidth, archs, context)),
            family_bw=family_bw,
            family_fixed=family_fixed,
            calibrated=spec.id in self.specs,
        )

    def tile_menu(self, arch: str, key: str) -> list[tuple[int, int]]:
        """Tiles the arch's library uses on a path (its own data, else, for SIMT paths, an
        architecture running the same cuBLAS SGEMM kernels); empty when none was seen."""
        for a in (arch, *_family_peers(arch, key, self.tile_menus)):
            menu = self.tile_menus.get(a, {}).get(key)
            if menu:
                return [(int(t[0]), int(t[1])) for t in menu]
        return []

    def transfer_for(self, measurement: str | None) -> Transfer:
        """Transfer exponents for a measurement kind (``neusight-bmm`` -> ``neusight``): its
        context's fit, else the per-kernel (``kernel``) context's, else the globals. A context
        whose data had no convolutions takes the convolution exponent of one whose data had
        (KernelBench's): cuDNN picks each GPU's own algorithm however the time was taken, and at
        a convolution's milliseconds a harness's per-call cost is noise."""
        found = self.transfer.get(measurement_context(measurement) or "kernel") or self.transfer.get("kernel")
        if found is not None:
            if found.conv is None:
                conv = next((t.conv for _, t in sorted(self.transfer.items()) if t.conv is not None), None)
                found = msgspec.structs.replace(found, conv=conv)
            return found
        g = self.globals
        return Transfer(gemm=g.alpha_gemm, gemm_memory=g.alpha_gemm, other=g.alpha_other)

    def residual_table(self, kind: str, spec: GPUSpec) -> ResidualTable | None:
        """The shape-residual grid of a measurement kind on a target spec, if fitted."""
        return self.residuals.get(kind, {}).get(spec.id)

    def floor_ns(self, kind: str, spec: GPUSpec) -> float | None:
        """Fitted fixed per-kernel time of a measurement kind on a spec, if any; a kind
        ``base-variant`` (``neusight-bmm``) falls back to ``base`` (``neusight``)."""
        value = self.floors_ns.get(kind, {}).get(spec.id)
        if value is None and "-" in kind:
            value = self.floors_ns.get(kind.split("-", 1)[0], {}).get(spec.id)
        return float(value) if value is not None else None

    def _own_tile(self, arch: str, key: str) -> list[int] | None:
        """The arch's own fitted tile policy for a path key (or its base key ``simt`` for
        ``simt_batched``), if any."""
        own = self.tiles.get(arch, {})
        return own.get(key) or own.get(key.split("_")[0]) or None

    def has_tile_policy(self, arch: str, key: str) -> bool:
        """Whether the arch has a GEMM tile policy for a path fitted on its own data (not
        borrowed from a kernel-family peer, not the least-time default)."""
        return self._own_tile(arch, key) is not None

    def tiles_seen(self, arch: str, key: str) -> bool:
        """Whether any data showed the GEMM tiles the arch's library runs on a path: its own
        fitted policy or kernel-name menu, or (SIMT paths) those of an architecture that runs the
        same cuBLAS SGEMM kernels. False: :meth:`tile` falls back to the least-time rule."""
        if self._own_tile(arch, key) is not None or self.tile_menu(arch, key):
            return True
        return any(self.tiles.get(other, {}).get(key) for other in _family_peers(arch, key, self.tiles))

    def tile(self, arch: str, key: str) -> tuple[int, int]:
        """Typical GEMM tile for an arch and path key, as fitted on that architecture's data.
        A SIMT path with no fit of its own takes the fit of an architecture that runs the same
        cuBLAS SGEMM kernels (:data:`SIMT_KERNEL_FAMILY`: ``volta_sgemm_*`` on Volta and Turing,
        ``ampere_sgemm_*`` on Ampere, Ada and Hopper), the library's choice being the kernel
        family's; otherwise (0, 0) -- the candidate tile with the least modelled time on the
        target (a different kernel family's choices do not carry over: leave-one-GPU-out error
        is lower with the physical choice than with a neighbour's)."""
        t = self._own_tile(arch, key)
        if t:
            return int(t[0]), int(t[1])
        for other in _family_peers(arch, key, self.tiles):
            t = self.tiles[other].get(key)
            if t:
                return int(t[0]), int(t[1])
        return 0, 0


def _family_peers(arch: str, key: str, table: Mapping[str, object]) -> list[str]:
    """Other archs in ``table`` whose cuBLAS runs the same SGEMM kernels as ``arch`` (SIMT
    path keys only; :data:`SIMT_KERNEL_FAMILY`), in a stable order."""
    family = SIMT_KERNEL_FAMILY.get(arch)
    if not key.startswith("simt") or family is None:
        return []
    return [a for a in sorted(table) if a != arch and SIMT_KERNEL_FAMILY.get(a) == family]


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


def _known_archs() -> dict[str, str]:
    from cascade.gpus.registry import default_registry

    return {s.id: s.arch for s in default_registry()}


_DEFAULT: Calibration | None = None


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Load a calibration JSON file; with no path, the packaged ``default.json`` (cached)."""
    global _DEFAULT
    if path is None:
        if _DEFAULT is None:
            entry = resources.files("cascade.calibration").joinpath("default.json")
            _DEFAULT = (msgspec.json.decode(entry.read_bytes(), type=Calibration)
                        if entry.is_file() else Calibration())
        return _DEFAULT
    p = Path(path)
    try:
        return msgspec.json.decode(p.read_bytes(), type=Calibration)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ConfigError("calibration file", str(p), f"a readable Cascade calibration JSON ({exc})") from None


def save_calibration(cal: Calibration, path: str | Path) -> None:
    """Write a calibration as indented JSON."""
    Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(cal), indent=2) + b"\n")


__all__ = [
    "BW_FAMILIES",
    "SIMT_KERNEL_FAMILY",
    "Calibration",
    "Globals",
    "ResidualTable",
    "ResolvedParams",
    "SpecParams",
    "Transfer",
    "load_calibration",
    "measurement_context",
    "save_calibration",
]


def measurement_of(kind: str, dataset: str) -> str:
    """Measurement kind of a data set kind (``vidur``, ``neusight``) and its data set name
    (see :attr:`MeasuredSet.measurement`)."""
    return "kernel" if kind == "vidur" else f"{kind}-{dataset}"

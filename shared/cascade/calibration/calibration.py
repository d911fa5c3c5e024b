"""A complete calibration (:class:`Calibration`): fitted parameters plus where they came from,
and how the parameters in effect for one GPU are resolved from them (fallbacks for GPUs without
a fit, tile policies per architecture, transfer exponents per measurement context)."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import msgspec

from cascade.calibration.parameters import (
    BW_FAMILIES,
    SIMT_KERNEL_FAMILY,
    ConvAlgos,
    Globals,
    ResidualTable,
    ResolvedParams,
    SpecParams,
    Transfer,
    measurement_context,
)
from cascade.gpus.spec import GPUSpec

T = TypeVar("T")


class PerCalibration(Generic[T]):
    """A value derived from a calibration, kept for the calibrations asked about last, by identity
    (each entry holds its calibration, so an id is not reused while it is here): a calibration is a
    value (frozen, never changed in place) and a fit's inner loop predicts with one thousands of
    times, hashing it or reading its metrics each time otherwise."""

    def __init__(self, make: Callable[[Calibration], T], kept: int = 16) -> None:
        self._make = make
        self._kept = kept
        self._held: dict[int, tuple[Calibration, T]] = {}

    def __call__(self, cal: Calibration) -> T:
        hit = self._held.get(id(cal))
        if hit is not None and hit[0] is cal:
            return hit[1]
        value = self._make(cal)
        if len(self._held) >= self._kept:
            self._held.pop(next(iter(self._held)))
        self._held[id(cal)] = (cal, value)
        return value


def _digest(cal: Calibration) -> str:
    return hashlib.sha256(msgspec.json.encode(cal)).hexdigest()[:16]


_DIGEST: PerCalibration[str] = PerCalibration(_digest)


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
    """Window kernel kind (:data:`cascade.engine.convmath.WINDOW_KINDS`: ``conv``, ``depthwise``,
    ``pool``) -> FP32 FLOPs per byte its address arithmetic costs on the CUDA cores, a kernel
    property fitted on KernelBench (``cascade validate --e2e --fit-transfer``): a third roof beside
    the counted FLOPs and the DRAM traffic (:func:`cascade.engine.convmath.with_simt_roof`). Empty:
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
        return _DIGEST(self)

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


def _known_archs() -> dict[str, str]:
    from cascade.gpus.registry import default_registry

    return {s.id: s.arch for s in default_registry()}

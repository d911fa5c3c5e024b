"""Fit the calibration on measured cross-GPU data (``cascade calibrate``).

Objective: the mean absolute percentage error of the ``scaled`` model over every
ordered GPU pair (groups weighted equally), plus a small absolute term that
anchors each GPU's achievable fractions to its own measured times, so GPUs
without data fall back to physically sensible values. A fixed fraction of
operator shapes (hash of the shape key) is held out of the fit and reported;
for data sets with three or more GPUs each GPU is also held out in turn.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from cascade import opfamilies
from cascade.calibration import (
    Calibration,
    Globals,
    ResidualTable,
    SpecParams,
    Transfer,
    measurement_context,
)
from cascade.engine.base import ModelContext
from cascade.engine.extrapolation import residual_cells
from cascade.engine.models import ScaledConfig, ScaledModel
from cascade.engine.perf import kernel_times, launch_waves, target_tiles, tile_key
from cascade.engine.workload import Workload, workload_of
from cascade.fitting.measured import MeasuredSet, Pair, pairs
from cascade.gpus.registry import GPURegistry, default_registry

#: Candidate GEMM tiles (first covers n, second covers m).
#: (0, 0) = the least-modelled-time candidate; (0, A) = the same among tiles of >= A outputs
#: (a library that never runs its smallest tiles on this path); (-1, 0) = the same among the
#: tiles the arch's library was seen to use (``Calibration.tile_menus``).
TILE_CANDIDATES: tuple[tuple[int, int], ...] = (
    (0, 0), (0, 2048), (0, 4096), (0, 8192), (-1, 0),
    (64, 64), (128, 64), (64, 128), (128, 128), (256, 128), (128, 256))
#: A tile counts in an arch's menu when at least this share of a path's calls ran it.
MENU_SHARE = 0.05
#: Residual grid cells span this many octaves of each GEMM dimension and need this many fit rows.
RESIDUAL_WIDTH = 2.0
RESIDUAL_MIN_ROWS = 5
_FAMILY_PARAMS = ("norm", "embedding", "elementwise")


class FitConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Which physical terms the fitted model has (the comparisons in ``docs/ACCURACY.md``):
    ``cascade calibrate`` and ``cascade validate --shift`` take them as options and record
    them in the calibration's ``command``."""

    split_k: bool = True
    """Split-K GEMMs (:func:`cascade.engine.perf.split_k_factors`; ``Globals.split_k``)."""
    l2_reuse: bool = False
    """A fitted share of L2 that a rerun operator's bytes find resident (``Globals.l2_resident``,
    :func:`cascade.engine.perf.memory_ns`). Off: tried, the fit drives the share to 0
    (docs/ACCURACY.md)."""
    family_fixed: bool = False
    """A fitted multiplier of each GPU's fixed per-kernel time per op family (norm,
    embedding, elementwise; ``SpecParams.family_fixed``), on per-kernel (``kernel``) data.
    Off: tried, worse on the shifted-shape protocol (docs/ACCURACY.md)."""

    tile_reuse: bool = True
    """A fitted operand-traffic cost of small SIMT GEMM tiles (``Globals.tile_reuse``,
    :func:`cascade.engine.perf.tile_reuse_factor`): with it the least-time tile choice of a
    GPU whose library's tiles are unknown no longer favours the smallest tiles (docs/ACCURACY.md,
    session 8)."""

    tensor_tile_reuse: bool = True
    """The same operand-traffic cost for tensor-core tiles, fitted apart
    (``Globals.tensor_tile_reuse``): small tensor tiles feed fewer MMAs per byte of shared
    memory read (docs/ACCURACY.md, session 10)."""

    tile_latency: bool = True
    """A fitted exposed start of each wave of tensor-core GEMM tiles (``Globals.tile_latency``,
    in DRAM latencies): short-K GEMMs (docs/ACCURACY.md, session 10)."""

    launch_waves: bool = True
    """A fitted wave quantisation of non-GEMM kernels whose grid and block size are known
    (``Globals.launch_waves``; Vidur's RMSNorm rows carry vLLM's launch shape): docs/ACCURACY.md,
    session 11."""

    warp_fill: bool = False
    """A SIMT GEMM tile of fewer warps than its SM has schedulers, alone on its SM, runs at warps /
    schedulers of the SM's rate (``Globals.warp_fill`` = 1, not fitted). Off: tried, no gain on
    the shifted-shape protocol and worse leave-one-GPU-out (docs/ACCURACY.md, session 12)."""

    simt_step: bool = False
    """A fitted least time per K step of a SIMT GEMM tile on its SM, per GPU (``SpecParams.simt_step``,
    in DRAM latencies): under-filled SGEMM grids are latency bound. Off: tried, the fit drives it
    towards 0 (docs/ACCURACY.md, session 12)."""

    gemm_stream: bool = True
    """GEMMs in per-kernel (``kernel``) times stream their operands at the spec's achievable
    DRAM fraction (``Globals.gemm_stream`` = 1, not fitted) instead of the ``bw_eff`` they
    share there with elementwise kernels (docs/ACCURACY.md, session 9)."""

    floor_prior: float = 0.05
    """Weight of a pull of each GPU's fitted harness floor (the fixed per-call time of a
    benchmark harness, ``neusight-*``) towards the geometric mean of the floors of the same
    measurement kind: the harness's fixed time is host-side, so a GPU whose data has few
    small calls (where the floor shows) keeps a floor like the others'. 0: off."""

    def options(self) -> str:
        """The command-line options that select this configuration (empty: the default)."""
        return (("" if self.split_k else " --no-split-k") + (" --l2-reuse" if self.l2_reuse else "")
                + (" --family-fixed" if self.family_fixed else "")
                + ("" if self.tile_reuse else " --no-tile-reuse")
                + ("" if self.tensor_tile_reuse else " --no-tensor-tile-reuse")
                + ("" if self.tile_latency else " --no-tile-latency")
                + ("" if self.launch_waves else " --no-launch-waves")
                + (" --warp-fill" if self.warp_fill else "")
                + (" --simt-step" if self.simt_step else "")
                + ("" if self.gemm_stream else " --no-gemm-stream")
                + ("" if self.floor_prior == type(self)().floor_prior else f" --floor-prior {self.floor_prior:g}"))


def compass_search(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.3,
                   evals: int = 2000, tol: float = 1e-4) -> tuple[np.ndarray, float]:
    """Minimise ``f`` from ``x0`` by coordinate-wise pattern search: each parameter in turn
    tries +/- its own step, keeps a move that lowers ``f`` (and lengthens that step),
    else halves the step; stops when every step is below ``tol`` or ``evals`` run out.
    Deterministic; suits objectives whose parameters act mostly on separate data (per-GPU
    efficiencies and floors) where a simplex in 30 dimensions converges slowly."""
    x = np.asarray(x0, dtype=np.float64).copy()
    fx = f(x)
    steps = np.full(len(x), float(step))
    used = 1
    while used < evals and steps.max() > tol:
        for i in range(len(x)):
            if steps[i] <= tol:
                continue
            moved = False
            for sign in (1.0, -1.0):
                y = x.copy()
                y[i] += sign * steps[i]
                fy = f(y)
                used += 1
                if fy < fx:
                    x, fx, moved = y, fy, True
                    steps[i] *= 1.5
                    break
            if not moved:
                steps[i] *= 0.5
            if used >= evals:
                break
    return x, float(fx)


def heldout_mask(keys: np.ndarray, fraction: float) -> np.ndarray:
    """True for rows whose shape key hashes into the held-out fraction (stable across runs)."""
    cut = round(fraction * 1000)
    return np.fromiter((zlib.crc32(str(k).encode()) % 1000 < cut for k in keys), dtype=bool, count=len(keys))


def _sig(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return float(np.log(p / (1 - p)))


@dataclass
class _Prepared:
    pair: Pair
    w: Workload
    measured: np.ndarray
    fit_rows: np.ndarray


def _prepare(pair: Pair, holdout: float, max_rows: int | None,
             exclude: Callable[[Pair], np.ndarray] | None = None) -> _Prepared:
    """A pair restricted to its fit rows (not held out, not excluded), at most ``max_rows``
    of them chosen by a stable hash of the shape key (same rows on every run)."""
    rows = ~heldout_mask(pair.keys, holdout)
    if exclude is not None:
        rows &= ~exclude(pair)
    if max_rows is not None and rows.sum() > max_rows:
        h = np.fromiter((zlib.crc32(b"sub" + str(k).encode()) for k in pair.keys), dtype=np.int64,
                        count=len(pair.keys))
        cut = np.sort(h[rows])[max_rows - 1]
        rows &= h <= cut
    idx = np.flatnonzero(rows)
    sub = Pair(pair.source, pair.target, pair.source_table.take(idx), pair.target_ns[idx],
               pair.groups[idx], pair.keys[idx])
    return _Prepared(sub, workload_of(sub.source_table), sub.target_ns, np.ones(len(idx), dtype=bool))


@dataclass
class _Layout:
    """Which parameter sits at which index of the search vector."""

    names: list[tuple[str, ...]]

    def index(self, *name: str) -> int:
        return self.names.index(tuple(name))


def _build_calibration(x: np.ndarray, layout: _Layout, tiles: dict[str, dict[str, list[int]]],
                       base: Calibration) -> Calibration:
    specs: dict[str, dict[str, object]] = {}
    floors: dict[str, dict[str, float]] = {}
    transfer: dict[str, dict[str, float]] = {}
    glob = {"softness": base.globals.softness, "alpha_gemm": base.globals.alpha_gemm,
            "alpha_other": base.globals.alpha_other, "min_tile_area": base.globals.min_tile_area,
            "clock_tau_ns": base.globals.clock_tau_ns, "wave_quant": base.globals.wave_quant,
            "split_k": base.globals.split_k, "l2_resident": base.globals.l2_resident,
            "tile_reuse": base.globals.tile_reuse, "gemm_stream": base.globals.gemm_stream,
            "tensor_tile_reuse": base.globals.tensor_tile_reuse, "tile_latency": base.globals.tile_latency,
            "launch_waves": base.globals.launch_waves, "warp_fill": base.globals.warp_fill,
            "sustained_clock_scale": base.globals.sustained_clock_scale}
    for value, name in zip(x, layout.names, strict=True):
        match name:
            case ("spec", sid, "family_bw", fam):
                specs.setdefault(sid, {}).setdefault("family_bw", {})[fam] = float(np.exp(value))  # type: ignore[index]
            case ("spec", sid, "family_fixed", fam):
                specs.setdefault(sid, {}).setdefault("family_fixed", {})[fam] = float(np.exp(value))  # type: ignore[index]
            case ("spec", sid, "simt_step"):
                specs.setdefault(sid, {})["simt_step"] = float(np.exp(value))
            case ("spec", sid, field):
                specs.setdefault(sid, {})[field] = _sig(float(value))
            case ("floor", kind, sid):
                floors.setdefault(kind, {})[sid] = float(np.exp(value))
            case ("global", "softness"):
                glob["softness"] = float(1.0 + np.exp(value))
            case ("global", "min_tile_area"):
                glob["min_tile_area"] = float(np.exp(value))
            case ("global", "clock_tau_ns"):
                glob["clock_tau_ns"] = float(np.exp(value))
            case ("global", "tile_reuse" | "tensor_tile_reuse" | "tile_latency"):
                glob[name[1]] = float(np.exp(value))
            case ("global", "sustained_clock_scale"):
                glob["sustained_clock_scale"] = float(np.exp(value))
            case ("transfer", context, field):
                transfer.setdefault(context, {})[field] = _sig(float(value))
            case ("global", field):
                glob[field] = _sig(float(value))
    return Calibration(
        id=base.id, version=base.version, globals=Globals(**glob),
        specs={sid: SpecParams(**p) for sid, p in specs.items()},  # type: ignore[arg-type]
        floors_ns=floors, tiles=tiles, defaults=base.defaults, contexts=base.contexts,
        transfer={c: Transfer(**t) for c, t in transfer.items()}, tile_menus=base.tile_menus)


def _spec_defaults(sets: Sequence[MeasuredSet]) -> dict[str, dict[str, float]]:
    """The physical default efficiencies (spec files) of every GPU in the data."""
    return {s.spec.id: {"simt_eff": s.spec.efficiency.simt, "tensor_eff": s.spec.efficiency.tensor,
                        "bw_eff": s.spec.efficiency.bandwidth} for s in sets}


def _tile_menus(runs: Sequence[tuple[str, Workload]]) -> dict[str, dict[str, list[list[int]]]]:
    """arch -> path key -> tiles named by the kernels the (arch, fit rows) ran, each on at
    least MENU_SHARE of that path's calls (held-out rows never count)."""
    counts: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    for arch, w in runs:
        named = w.is_gemm & (w.tile_a > 0) & (w.tile_b > 0)
        for tensor in (False, True):
            for batched in (False, True):
                sel = named & (w.tensor == tensor) & ((w.batch > 1) == batched)
                if not sel.any():
                    continue
                slot = counts.setdefault((arch, tile_key(tensor, batched)), {})
                for a, b in zip(w.tile_a[sel].tolist(), w.tile_b[sel].tolist(), strict=True):
                    slot[(int(a), int(b))] = slot.get((int(a), int(b)), 0) + 1
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (arch, key), tiles in sorted(counts.items()):
        total = sum(tiles.values())
        menu = sorted([list(t) for t, n in tiles.items() if n >= MENU_SHARE * total])
        if menu:
            out.setdefault(arch, {})[key] = menu
    return out


def _contexts(sets: Sequence[MeasuredSet]) -> dict[str, list[str]]:
    """Measurement context (``kernel``, ``neusight``) -> the GPUs the data fit in it."""
    out: dict[str, set[str]] = {}
    for s in sets:
        out.setdefault(measurement_context(s.measurement) or "kernel", set()).add(s.spec.id)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _initial(sets: Sequence[MeasuredSet], config: FitConfig | None = None) -> tuple[_Layout, np.ndarray]:
    config = config or FitConfig()
    names: list[tuple[str, ...]] = []
    x: list[float] = []
    seen: set[tuple[str, ...]] = set()

    def add(name: tuple[str, ...], value: float) -> None:
        if name not in seen:
            seen.add(name)
            names.append(name)
            x.append(value)

    kinds: dict[str, tuple[bool, bool]] = {}  # context -> (has GEMMs, has other kernels)
    has_tensor = has_simt = False  # GEMM paths in the data (each tile-reuse term needs its own)
    has_launch_shape = False  # non-GEMM kernels with a grid and block size
    for s in sets:
        w = workload_of(s.table)
        has_tensor = has_tensor or bool(np.any(w.is_gemm & w.tensor))
        has_simt = has_simt or bool(np.any(w.is_gemm & ~w.tensor))
        has_launch_shape = has_launch_shape or bool(np.any(np.isfinite(launch_waves(w, s.spec))))
        sid = s.spec.id
        gemm, other = kinds.get(measurement_context(s.measurement) or "kernel", (False, False))
        kinds[measurement_context(s.measurement) or "kernel"] = (
            gemm or bool(w.is_gemm.any()), other or not bool(w.is_gemm.all()))
        if np.any(w.is_gemm & w.tensor):
            add(("spec", sid, "tensor_eff"), _logit(0.75))
        if np.any(w.is_gemm & ~w.tensor):
            add(("spec", sid, "simt_eff"), _logit(0.8))
            if config.simt_step:
                add(("spec", sid, "simt_step"), float(np.log(2.0)))
        add(("spec", sid, "bw_eff"), _logit(0.7))
        for fam in _FAMILY_PARAMS:
            if np.any(w.family == opfamilies.FAMILIES.index(fam)):
                add(("spec", sid, "family_bw", fam), 0.0)
                if config.family_fixed and s.measurement == "kernel":
                    add(("spec", sid, "family_fixed", fam), 0.0)
        add(("floor", s.measurement, sid), float(np.log(max(np.percentile(s.table["duration_ns"], 1) * 0.8, 500.0))))
    add(("global", "softness"), float(np.log(2.0)))
    for context, (has_gemm, has_other) in kinds.items():  # for the kernel kinds its data has
        if has_gemm:
            add(("transfer", context, "gemm"), _logit(0.5))
            add(("transfer", context, "gemm_memory"), _logit(0.5))
        if has_other:
            add(("transfer", context, "other"), _logit(0.95))
    add(("global", "min_tile_area"), float(np.log(4096.0)))
    add(("global", "wave_quant"), _logit(0.5))
    if config.l2_reuse:
        add(("global", "l2_resident"), _logit(0.5))
    if config.tile_reuse and has_simt:
        add(("global", "tile_reuse"), float(np.log(8.0)))
    if config.tensor_tile_reuse and has_tensor:
        add(("global", "tensor_tile_reuse"), 0.0)
    if config.tile_latency and has_tensor:
        add(("global", "tile_latency"), float(np.log(2.0)))
    if config.launch_waves and has_launch_shape:
        add(("global", "launch_waves"), _logit(0.5))
    if any(s.spec.sustained_clock_ratio > 1.0 for s in sets):
        add(("global", "clock_tau_ns"), float(np.log(1.0e6)))
        add(("global", "sustained_clock_scale"), 0.0)
    return _Layout(names), np.asarray(x)


def _floor_groups(layout: _Layout) -> list[np.ndarray]:
    """Indices of the harness floors (``neusight-*``) of each measurement kind fitted on two
    or more GPUs (the per-kernel ``kernel`` floors are launch overheads: not pooled)."""
    by_kind: dict[str, list[int]] = {}
    for i, name in enumerate(layout.names):
        if name[0] == "floor" and measurement_context(name[1]) not in (None, "kernel"):
            by_kind.setdefault(name[1], []).append(i)
    return [np.asarray(v) for _k, v in sorted(by_kind.items()) if len(v) >= 2]


def _pair_error(p: _Prepared, cal: Calibration, archs: dict[str, str], anchor: float, model: ScaledModel) -> float:
    """One GPU pair's term of the objective under ``cal``."""
    src, tgt = p.pair.source, p.pair.target
    ctx = ModelContext(src.spec, cal, ScaledConfig(measurement=src.measurement), archs)
    sel = p.fit_rows
    pred = model.predict(p.pair.source_table, p.w, tgt.spec, ctx).predicted_ns
    err = float(np.mean(np.abs(pred[sel] / p.measured[sel] - 1.0)))
    if anchor > 0:
        fixed = cal.floor_ns(src.measurement, tgt.spec) or tgt.spec.launch_overhead_ns
        absolute = kernel_times(p.w, tgt.spec, cal.params_for(tgt.spec, archs, src.measurement), cal, fixed,
                                target_tiles(p.w, tgt.spec, cal, src.spec)).total_ns
        err += anchor * float(np.mean(np.abs(np.log(absolute[sel] / p.measured[sel]))))
    return err


def _combine(prepared: Sequence[_Prepared], errors: Sequence[float]) -> float:
    """The objective from every pair's term: the mean over (kind, dataset) of their pairs' mean."""
    groups: dict[tuple[str, str], list[float]] = {}
    for p, err in zip(prepared, errors, strict=True):
        groups.setdefault((p.pair.source.kind, p.pair.source.dataset), []).append(err)
    return float(np.mean([np.mean(v) for v in groups.values()]))


def _objective(prepared: Sequence[_Prepared], layout: _Layout, tiles: dict[str, dict[str, list[int]]],
               base: Calibration, archs: dict[str, str], anchor: float,
               floor_prior: float = 0.0) -> Callable[[np.ndarray], float]:
    model = ScaledModel()
    floor_groups = _floor_groups(layout) if floor_prior > 0 else []

    def f(x: np.ndarray) -> float:
        cal = _build_calibration(x, layout, tiles, base)
        value = _combine(prepared, [_pair_error(p, cal, archs, anchor, model) for p in prepared])
        for idx in floor_groups:  # log floors' spread around their kind's mean
            value += floor_prior * float(np.mean((x[idx] - x[idx].mean()) ** 2))
        return value

    return f


def _tile_slots(prepared: Sequence[_Prepared]) -> list[tuple[str, str]]:
    """Every (arch, GEMM path key) the data has GEMMs on, in a stable order."""
    slots: list[tuple[str, str]] = []
    for p in prepared:
        for spec in (p.pair.source.spec, p.pair.target.spec):
            for tensor in (False, True):
                for batched in (False, True):
                    sel = p.w.is_gemm & (p.w.tensor == tensor) & ((p.w.batch > 1) == batched)
                    key = tile_key(tensor, batched)
                    if sel.any() and (spec.arch, key) not in slots:
                        slots.append((spec.arch, key))
    return slots


def _path_keys(p: _Prepared) -> frozenset[str]:
    """The GEMM path keys (:func:`tile_key`) a pair's workload has rows on."""
    return frozenset(tile_key(tensor, batched) for tensor in (False, True) for batched in (False, True)
                     if (p.w.is_gemm & (p.w.tensor == tensor) & ((p.w.batch > 1) == batched)).any())


def _choose_tiles(prepared: Sequence[_Prepared], layout: _Layout, x: np.ndarray,
                  base: Calibration, archs: dict[str, str],
                  start: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    """Pick each (arch, path) GEMM tile from the candidates, one slot at a time.

    A slot's tile reaches only the pairs with a GPU of its architecture (source or target) and
    GEMMs on its path: each candidate re-predicts those pairs, the others keep their term (the
    same objective as re-predicting every pair, at a fraction of the cost)."""
    slots = _tile_slots(prepared)
    model = ScaledModel()
    tiles: dict[str, dict[str, list[int]]] = {}
    for arch, key in slots:
        tiles.setdefault(arch, {})[key] = list(start.get(arch, {}).get(key, [0, 0]))
    errors = [_pair_error(p, _build_calibration(x, layout, tiles, base), archs, 0.0, model) for p in prepared]
    keys = [_path_keys(p) for p in prepared]
    for _round in range(2):
        for arch, key in slots:
            touched = [i for i, p in enumerate(prepared)
                       if key in keys[i] and arch in (p.pair.source.spec.arch, p.pair.target.spec.arch)]
            best: tuple[float, list[int], list[float]] | None = None
            for cand in TILE_CANDIDATES:
                tiles[arch][key] = list(cand)
                cal = _build_calibration(x, layout, tiles, base)
                trial = list(errors)
                for i in touched:
                    trial[i] = _pair_error(prepared[i], cal, archs, 0.0, model)
                val = _combine(prepared, trial)
                if best is None or val < best[0]:
                    best = (val, list(cand), trial)
            assert best is not None
            tiles[arch][key] = best[1]
            errors = best[2]
    return tiles


def _residual_tables(all_pairs: Sequence[Pair], cal: Calibration, archs: dict[str, str], holdout: float,
                     exclude: Callable[[Pair], np.ndarray] | None, width: float = RESIDUAL_WIDTH,
                     min_rows: int = RESIDUAL_MIN_ROWS) -> dict[str, dict[str, ResidualTable]]:
    """Per (measurement kind, target GPU): the median log(measured / predicted) of every fit
    row (never a held-out or excluded one) of the cross-architecture GEMM pairs into it, in
    cells of the shape grid (:func:`cascade.engine.extrapolation.residual_cells`)."""
    model = ScaledModel()
    acc: dict[tuple[str, str], tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for pair in all_pairs:
        src, tgt = pair.source, pair.target
        if src.spec.arch == tgt.spec.arch:
            continue
        rows = ~heldout_mask(pair.keys, holdout)
        if exclude is not None:
            rows &= ~exclude(pair)
        w = workload_of(pair.source_table)
        cfg = ScaledConfig(measurement=src.measurement, residuals=False)
        pred = model.predict(pair.source_table, w, tgt.spec, ModelContext(src.spec, cal, cfg, archs)).predicted_ns
        cells = residual_cells(w, width)
        with np.errstate(invalid="ignore", divide="ignore"):
            lr = np.log(pair.target_ns / pred)
        ok = rows & (cells >= 0) & np.isfinite(lr)
        cs, ls = acc.setdefault((src.measurement, tgt.spec.id), ([], []))
        cs.append(cells[ok])
        ls.append(lr[ok])
    out: dict[str, dict[str, ResidualTable]] = {}
    for (kind, sid), (cs, ls) in sorted(acc.items()):
        cells, lr = np.concatenate(cs), np.concatenate(ls)
        if len(cells) == 0:
            continue
        order = np.argsort(cells, kind="stable")
        cells, lr = cells[order], lr[order]
        uniq, start, count = np.unique(cells, return_index=True, return_counts=True)
        keep = count >= min_rows
        meds = [float(np.median(lr[a:a + n])) for a, n in zip(start[keep], count[keep], strict=True)]
        if meds:
            out.setdefault(kind, {})[sid] = ResidualTable(
                width=width, min_rows=min_rows, keys=[int(k) for k in uniq[keep]], values=meds,
                rows=[int(n) for n in count[keep]])
    return out


def fit_sets(sets: Sequence[MeasuredSet], *, holdout: float = 0.2, evals: int = 800,
             anchor: float = 0.15, registry: GPURegistry | None = None,
             log: Callable[[str], None] = lambda _m: None, max_rows: int | None = 3000,
             rounds: int = 3, base_globals: Globals | None = None,
             exclude: Callable[[Pair], np.ndarray] | None = None, residuals: bool = True,
             config: FitConfig | None = None) -> Calibration:
    """Fit a calibration on measured sets, holding out ``holdout`` of the shapes.

    ``max_rows`` caps the fit rows per GPU pair (a stable hash subsample; None = all),
    ``evals`` the objective evaluations of each parameter search and ``rounds`` the
    alternations of parameter search and tile choice: the defaults take about 30 seconds,
    ``cascade calibrate --thorough`` uses every row and more rounds. ``base_globals`` sets
    the starting (and unfitted) global parameters. ``exclude`` marks further rows of a pair
    the fit must not see (a shape group held out for an extrapolation test). ``residuals``
    adds each target's shape-residual grid (:func:`_residual_tables`) from the fit rows.
    ``config`` selects the model's physical terms (:class:`FitConfig`; ``base_globals``'
    ``split_k`` wins where given).
    """
    config = config or FitConfig()
    reg = registry or default_registry()
    archs = {s.id: s.arch for s in reg}
    all_pairs = pairs(list(sets))
    prepared = [_prepare(pair, holdout, max_rows, exclude) for pair in all_pairs]
    base = Calibration(id="cascade-default", defaults=_spec_defaults(sets),
                       globals=base_globals or Globals(split_k=1.0 if config.split_k else 0.0,
                                                       gemm_stream=1.0 if config.gemm_stream else 0.0,
                                                       warp_fill=1.0 if config.warp_fill else 0.0),
                       contexts=_contexts(sets),
                       tile_menus=_tile_menus([(p.pair.source.spec.arch, p.w) for p in prepared]))
    layout, x = _initial(sets, config)
    log(f"fitting {len(x)} parameters on {len(prepared)} GPU pairs "
        f"({sum(len(p.measured) for p in prepared)} rows)")
    # every path of the data starts on the least-time rule: an arch of the data is never
    # "unseen" (ScaledModel treats paths without a policy of their own differently)
    tiles: dict[str, dict[str, list[int]]] = {}
    for arch, key in _tile_slots(prepared):
        tiles.setdefault(arch, {})[key] = [0, 0]
    best = float("inf")
    for round_ in range(rounds):
        x, val = compass_search(_objective(prepared, layout, tiles, base, archs, anchor, config.floor_prior), x,
                                step=0.4 if round_ == 0 else 0.15, evals=evals)
        log(f"round {round_}: objective {val:.4f}")
        tiles = _choose_tiles(prepared, layout, x, base, archs, tiles)
        log(f"tiles: {tiles}")
        if best - val < 1e-3:
            break
        best = val
    x, val = compass_search(_objective(prepared, layout, tiles, base, archs, anchor, config.floor_prior), x,
                            step=0.1, evals=evals // 2)
    log(f"final objective {val:.4f}; tiles {tiles}")
    cal = _build_calibration(x, layout, tiles, base)
    if residuals:
        cal = msgspec.structs.replace(cal, residuals=_residual_tables(all_pairs, cal, archs, holdout, exclude))
    return cal



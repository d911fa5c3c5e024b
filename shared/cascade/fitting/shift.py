"""Shifted-shape protocol: refit without whole regions of the shape space, score only them.

The calibration's random 20% held-out split leaves every held-out shape with fitted
neighbours of the same sizes; a new model's layers or a differently drawn benchmark do not.
Each *shift* below removes whole regions of the shape space from the fit (parameters and
residual grids) and scores only those rows, per region, data set, family and GPU pair:

- ``octave``: every operator falls in a cell of one size octave per dimension
  (floor(log2) of batch, M, N, K for GEMMs; of DRAM bytes for other kernels); cells whose
  octave sum is even form one region, odd ones the other (a 4-D checkerboard: two refits,
  each fitted on one colour and scored on the other, so no scored row shares a 1-octave cell
  with a fitted one);
- ``aspect``: the squarest and the most elongated GEMMs (log2 max(M, N, K) / min(M, N, K),
  below the 15th / above the 85th percentile of the data set), one refit;
- ``extremes``: the smallest and the largest operators (FLOPs for GEMMs, bytes otherwise;
  below the 10th / above the 90th percentile of the data set's kernels of that kind), one
  refit.

Quantiles are taken per data set over every pair's rows, so the same shapes leave every
GPU pair. ``cascade calibrate`` records the rows (``metrics["shifted_shapes"]``, ``left_out``
= the region, ``shift`` = the protocol) and :func:`cascade.calibration.accuracy.expected_accuracy`
quotes them for calibrated pairs; ``cascade validate --shift KIND`` prints them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cascade.engine.workload import workload_of
from cascade.fitting.measured import MeasuredSet, Pair, pairs
from cascade.gpus.registry import GPURegistry, default_registry

SHIFTS: tuple[str, ...] = ("octave", "aspect", "extremes")
ASPECT_QUANTILE = 0.15
EXTREME_QUANTILE = 0.10


def _octave_parity(pair: Pair) -> np.ndarray:
    """0 / 1: parity of the summed 1-octave cell indices of each row's shape."""
    w = workload_of(pair.source_table)
    out = np.zeros(len(w), dtype=np.int64)
    gemm = w.is_gemm
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.zeros(len(w), dtype=np.int64)
        for f in ("batch", "m", "n", "k"):
            d = np.nan_to_num(getattr(w, f), nan=1.0)
            total += np.floor(np.log2(np.maximum(d, 1.0))).astype(np.int64)
        other = np.floor(np.log2(np.maximum(np.nan_to_num(w.bytes), 1.0))).astype(np.int64)
    out[:] = np.where(gemm, total, other) % 2
    return out


def _aspect(pair: Pair) -> np.ndarray:
    """log2(max / min) of M, N, K for GEMMs; NaN for other kernels."""
    w = workload_of(pair.source_table)
    dims = np.vstack([w.m, w.n, w.k]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rows without GEMM dims: NaN
        r = np.log2(np.nanmax(dims, axis=0) / np.nanmin(dims, axis=0)) if len(w) else np.zeros(0)
    return np.where(w.is_gemm, r, np.nan)


def _size(pair: Pair) -> tuple[np.ndarray, np.ndarray]:
    """(size, is GEMM): FLOPs for GEMMs, DRAM bytes for the others."""
    w = workload_of(pair.source_table)
    return np.where(w.is_gemm, np.nan_to_num(w.flops), np.nan_to_num(w.bytes)), w.is_gemm


Region = tuple[str, Callable[[Pair], np.ndarray]]


def _parity_is(parity: int) -> Callable[[Pair], np.ndarray]:
    def held(p: Pair) -> np.ndarray:
        return np.asarray(_octave_parity(p) == parity)
    return held


def folds(sets: Sequence[MeasuredSet], shift: str) -> list[list[Region]]:
    """The refits of a shift: each a list of (region name, pair -> held-out rows)."""
    all_pairs = pairs(list(sets))
    if shift == "octave":
        return [[(f"octave cells, {name}", _parity_is(b))] for b, name in ((0, "even"), (1, "odd"))]
    if shift == "aspect":
        by_set: dict[str, list[np.ndarray]] = {}
        for p in all_pairs:
            a = _aspect(p)
            by_set.setdefault(p.source.dataset, []).append(a[np.isfinite(a)])
        cuts = {d: (float(np.quantile(np.concatenate(v), ASPECT_QUANTILE)),
                    float(np.quantile(np.concatenate(v), 1 - ASPECT_QUANTILE)))
                for d, v in by_set.items() if sum(map(len, v))}

        def square(p: Pair) -> np.ndarray:
            c = cuts.get(p.source.dataset)
            a = _aspect(p)
            return np.zeros(len(a), dtype=bool) if c is None else np.nan_to_num(a, nan=np.inf) <= c[0]

        def long(p: Pair) -> np.ndarray:
            c = cuts.get(p.source.dataset)
            a = _aspect(p)
            return np.zeros(len(a), dtype=bool) if c is None else np.nan_to_num(a, nan=-np.inf) > c[1]

        return [[(f"aspect: squarest {ASPECT_QUANTILE:.0%}", square),
                 (f"aspect: most elongated {ASPECT_QUANTILE:.0%}", long)]]
    if shift == "extremes":
        by: dict[tuple[str, bool], list[np.ndarray]] = {}
        for p in all_pairs:
            s, g = _size(p)
            for gemm in (False, True):
                v = s[(g == gemm) & (s > 0)]
                by.setdefault((p.source.dataset, gemm), []).append(v)
        lim = {k: (float(np.quantile(np.concatenate(v), EXTREME_QUANTILE)),
                   float(np.quantile(np.concatenate(v), 1 - EXTREME_QUANTILE)))
               for k, v in by.items() if sum(map(len, v))}

        def side(p: Pair, small: bool) -> np.ndarray:
            s, g = _size(p)
            out = np.zeros(len(s), dtype=bool)
            for gemm in (False, True):
                c = lim.get((p.source.dataset, gemm))
                if c is None:
                    continue
                sel = (g == gemm) & (s > 0)
                out |= sel & ((s < c[0]) if small else (s > c[1]))
            return out

        return [[(f"smallest {EXTREME_QUANTILE:.0%}", lambda p: side(p, True)),
                 (f"largest {EXTREME_QUANTILE:.0%}", lambda p: side(p, False))]]
    from cascade.errors import ValidationError

    raise ValidationError(f"unknown shift {shift!r}; expected one of {', '.join(SHIFTS)}", field="shift")


def shifted_rows(sets: Sequence[MeasuredSet], shifts: Sequence[str] = SHIFTS, *, evals: int = 400,
                 max_rows: int | None = 3000, rounds: int = 2, registry: GPURegistry | None = None,
                 log: Callable[[str], None] = lambda _m: None) -> list[dict[str, object]]:
    """Refit without each fold's regions and score them: ErrorStats rows (as dicts, MAPE etc.
    rounded to 0.01) with ``left_out`` = region and ``shift`` = protocol."""
    from msgspec import to_builtins

    from cascade.fitting.fit import fit_sets
    from cascade.fitting.validation import evaluate

    reg = registry or default_registry()
    all_pairs = pairs(list(sets))
    rows: list[dict[str, object]] = []
    for shift in shifts:
        for fold in folds(sets, shift):

            def held(pair: Pair, fold: list[Region] = fold) -> np.ndarray:
                out = np.zeros(len(pair.keys), dtype=bool)
                for _name, fn in fold:
                    out |= fn(pair)
                return out

            log(f"shifted shapes: {shift}, refit without {' + '.join(n for n, _ in fold)}")
            cal = fit_sets(sets, holdout=0.0, evals=evals, registry=reg, exclude=held, rounds=rounds,
                           max_rows=max_rows)
            for name, fn in fold:
                select = {(p.source.dataset, p.source.spec.id, p.target.spec.id): fn(p) for p in all_pairs}
                scored = [p for p in all_pairs if select[(p.source.dataset, p.source.spec.id, p.target.spec.id)].any()]
                for s in evaluate(scored, cal, ("roofline", "scaled"), reg=reg, select=select):
                    d = to_builtins(s)
                    if not d["count"]:
                        continue
                    for k in ("mape", "median_ape", "p90_ape"):
                        d[k] = round(d[k], 2)
                    d["left_out"] = name
                    d["shift"] = shift
                    rows.append(d)
    return rows


def pooled(rows: Sequence[Mapping[str, Any]], model: str = "scaled",
           ) -> dict[tuple[str, str, str], float]:
    """(shift, source, target) -> count-weighted MAPE over its regions and data sets (one
    ``all`` row per data set where it has one, else its family rows)."""
    from cascade.calibration.accuracy import _cells

    acc: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for r in _cells([r for r in rows if r.get("model") == model]):
        acc.setdefault((str(r["shift"]), str(r["source"]), str(r["target"])), []).append(
            (float(r["mape"]), int(r["count"])))  # type: ignore[arg-type, call-overload]
    return {k: sum(m * c for m, c in v) / sum(c for _, c in v) for k, v in acc.items()}

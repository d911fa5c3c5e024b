"""Which GEMM tiles cuBLAS really ran against the tiles the model's least-time rule picks.

NeuSight's files name the cuBLAS kernel of every call (``ampere_sgemm_128x64_nn``), so its
tile is known. For each GPU and SIMT path this compares that tile with the one the
least-time rule (:func:`cascade.engine.perf.target_tiles` with no tile policy: the rule an
uncalibrated architecture gets) picks over :data:`cascade.engine.perf.TILE_CANDIDATES`, for
several values of the tile operand-traffic cost (``Globals.tile_reuse``). No timing is used.

``python -m cascade.fitting.tiles [--data DIR] [--calibration FILE]`` prints the table quoted
in docs/ACCURACY.md: the rule without the term (c = 0) and with the calibration's own c, both
with the calibration's other fitted globals (smallest tile area, wave quantisation).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from cascade.calibration import Calibration, load_calibration
from cascade.engine.perf import TILE_CANDIDATES, _take, gemm_compute_ns, tile_reuse_factor
from cascade.engine.workload import workload_of
from cascade.fitting.measured import MeasuredSet, discover
from cascade.gpus.registry import default_registry

REUSE_VALUES: tuple[float, ...] = (0.0, 2.0, 4.0, 8.0)


def tile_choice_rows(sets: Sequence[MeasuredSet], cal: Calibration,
                     reuse_values: Sequence[float] = REUSE_VALUES) -> list[dict[str, object]]:
    """Per (data set, GPU, batched or not) with named SIMT tiles: the tiles that ran (share
    of calls) and, per reuse value, the median log2(picked area / real area) and the share
    of calls where the picked tile is the real one."""
    cand = np.asarray(TILE_CANDIDATES, dtype=np.float64)
    rows: list[dict[str, object]] = []
    for s in sets:
        w = workload_of(s.table)
        for batched in (False, True):
            sel = w.is_gemm & ~w.tensor & (w.tile_a > 0) & (w.tile_b > 0) & ((w.batch > 1) == batched)
            idx = np.flatnonzero(sel)
            if len(idx) < 100:
                continue
            sub = _take(w, idx)
            ones = np.ones(len(idx))
            base = np.stack([gemm_compute_ns(sub, s.spec, ones, np.full(len(idx), a), np.full(len(idx), b),
                                             cal.globals.min_tile_area, cal.globals.wave_quant)
                             for a, b in TILE_CANDIDATES])
            real = np.stack([sub.tile_a, sub.tile_b], axis=1)
            tiles, counts = np.unique(real, axis=0, return_counts=True)
            order = np.argsort(-counts)
            ran = ", ".join(f"{int(tiles[i][0])}x{int(tiles[i][1])} {100 * counts[i] / len(idx):.0f}%"
                            for i in order if counts[i] >= 0.05 * len(idx))
            row: dict[str, object] = {"dataset": s.dataset, "gpu": s.spec.id, "batched": batched,
                                      "calls": len(idx), "ran": ran}
            for c in reuse_values:
                traffic = tile_reuse_factor(cand[:, 0], cand[:, 1], c)
                picked = cand[np.argmin(base * traffic[:, None], axis=0)]
                log_area = np.log2(picked[:, 0] * picked[:, 1] / (real[:, 0] * real[:, 1]))
                row[f"area_{c:g}"] = float(np.median(log_area))
                row[f"match_{c:g}"] = float(np.mean(np.all(picked == real, axis=1)))
            rows.append(row)
    return rows


def markdown(rows: Sequence[dict[str, object]], reuse_values: Sequence[float] = REUSE_VALUES) -> str:
    head = " | ".join(f"c = {c:g}: log2 area / real, match" for c in reuse_values)
    out = [f"| data | GPU | path | calls | tiles cuBLAS ran (>= 5% of calls) | {head} |",
           "|" + "---|" * (5 + len(reuse_values))]
    for r in rows:
        cells = " | ".join(f"{r[f'area_{c:g}']:+.0f}, {100 * float(r[f'match_{c:g}']):.0f}%"  # type: ignore[arg-type]
                           for c in reuse_values)
        path = "batched" if r["batched"] else "plain"
        out.append(f"| {r['dataset']} | {r['gpu']} | {path} | {r['calls']} | {r['ran']} | {cells} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cascade.fitting.tiles", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/measured", help="measured data directory")
    ap.add_argument("--calibration", default=None, help="calibration JSON (default: the packaged one)")
    args = ap.parse_args(argv)
    sets = [s for s in discover(args.data, default_registry()) if s.kind == "neusight"]
    if not sets:
        sys.stderr.write(f"no NeuSight data (with kernel names) under {args.data}\n")
        return 1
    cal = load_calibration(args.calibration)
    reuse = (0.0, cal.globals.tile_reuse) if cal.globals.tile_reuse > 0 else (0.0,)
    sys.stdout.write(f"calibration digest {cal.digest()}: min_tile_area {cal.globals.min_tile_area:.0f}, "
                     f"tile_reuse {cal.globals.tile_reuse:.2f}\n\n")
    sys.stdout.write(markdown(tile_choice_rows(sets, cal, reuse), reuse))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shape extrapolation: leave one tensor-parallel degree out of the FP16 (Vidur) fit.

Held-out shapes (``cascade calibrate``) are a random 20% of operator shapes, so every held-out
GEMM has fitted neighbours of the same widths. Another model's layers have widths the fit
never saw; the closest test the data allow is to hold out every row of one tensor-parallel
degree (its GEMM widths are the model's divided by TP: TP 1 the widest, TP 8 the narrowest),
refit without them and score only them.

``python -m cascade.calibration.extrapolate [--data DIR] [--evals N]`` prints, per held-out
degree, data set, family and GPU pair, the count and MAPE / median / p90 of ``roofline`` and
``scaled`` (markdown, as in ``ACCURACY.md``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from cascade.calibration.fit import fit_sets
from cascade.calibration.report import markdown_table
from cascade.engine.measured import MeasuredSet, Pair, discover, pairs, vidur_tp_degree
from cascade.engine.validation import evaluate
from cascade.gpus.registry import GPURegistry, default_registry


def leave_one_tp_out(sets: Sequence[MeasuredSet], *, evals: int = 800,
                     registry: GPURegistry | None = None) -> list[dict[str, object]]:
    """For every TP degree in the Vidur sets: refit without any row of that degree (the other
    data sets fit as usual, with their 20% held-out shapes) and score those rows alone."""
    from msgspec import to_builtins

    reg = registry or default_registry()
    vidur_pairs = [p for p in pairs(list(sets)) if p.source.kind == "vidur"]
    degrees = sorted({int(d) for p in vidur_pairs for d in vidur_tp_degree(p.keys)})
    rows: list[dict[str, object]] = []
    for tp in degrees if len(degrees) > 1 else []:

        def held(pair: Pair, tp: int = tp) -> np.ndarray:
            if pair.source.kind != "vidur":
                return np.zeros(len(pair.keys), dtype=bool)
            return vidur_tp_degree(pair.keys) == tp

        cal = fit_sets(sets, evals=evals, registry=reg, exclude=held, rounds=2)
        select = {(p.source.dataset, p.source.spec.id, p.target.spec.id): held(p) for p in vidur_pairs}
        for s in evaluate(vidur_pairs, cal, ("roofline", "scaled"), reg=reg, select=select):
            d = to_builtins(s)
            d["left_out"] = f"TP {tp}"
            rows.append(d)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cascade.calibration.extrapolate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/measured", help="measured data directory")
    ap.add_argument("--evals", type=int, default=800, help="objective evaluations per search")
    args = ap.parse_args(argv)
    rows = leave_one_tp_out(discover(args.data, default_registry()), evals=args.evals)
    if not rows:
        sys.stderr.write(f"no Vidur data with two or more tensor-parallel degrees under {args.data}\n")
        return 1
    sys.stdout.write(markdown_table(rows, families=("all",)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shape extrapolation: refit without a block of shapes, score only that block.

Held-out shapes (``cascade calibrate``) are a random 20% of operator shapes, so every held-out
GEMM has fitted neighbours of the same widths. Another model's layers have widths the fit
never saw; the closest tests the data allow:

- **one tensor-parallel degree out** (FP16, Vidur): every row of one TP degree (its GEMM
  widths are the model's divided by TP: TP 1 the widest, TP 8 the narrowest);
- **the largest shapes out** (``--largest Q``, every data set): every GEMM above the Q
  quantile of its data set's FLOPs (the same shapes on every GPU), so the fit and the
  residual grids see only smaller problems than the ones scored.

``python -m cascade.fitting.extrapolate [--data DIR] [--evals N] [--largest Q]`` prints,
per left-out block, data set, family and GPU pair, the count and MAPE / median / p90 of
``roofline`` and ``scaled`` (markdown, as in ``docs/ACCURACY.md``); the TP run adds the per-layer
sums (:mod:`cascade.fitting.layers`, family ``layer``) beside the per-operator rows, and the
repeatability floor of the operators whose work is the same at every degree
(:mod:`cascade.fitting.repeat`, family ``same work``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from cascade.engine.workload import workload_of
from cascade.fitting.fit import FitConfig, fit_sets
from cascade.fitting.layers import layer_rows
from cascade.fitting.measured import MeasuredSet, Pair, discover, pairs, vidur_tp_degree
from cascade.fitting.repeat import SAME_WORK, repeat_rows
from cascade.fitting.report import markdown_table
from cascade.fitting.validation import evaluate, pair_predictions
from cascade.gpus.registry import GPURegistry, default_registry


def leave_one_tp_out(sets: Sequence[MeasuredSet], *, evals: int = 800,
                     registry: GPURegistry | None = None, config: FitConfig | None = None) -> list[dict[str, object]]:
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

        cal = fit_sets(sets, evals=evals, registry=reg, exclude=held, rounds=2, config=config)
        select = {(p.source.dataset, p.source.spec.id, p.target.spec.id): held(p) for p in vidur_pairs}
        for s in evaluate(vidur_pairs, cal, ("roofline", "scaled"), reg=reg, select=select):
            d = to_builtins(s)
            d["left_out"] = f"TP {tp}"
            rows.append(d)
        rows.extend(layer_rows(vidur_pairs, cal, reg=reg, select=select, left_out=f"TP {tp}"))
        preds = [{m: pair_predictions(p, m, cal, reg) for m in ("roofline", "scaled")} for p in vidur_pairs]
        rows.extend(repeat_rows(vidur_pairs, [held(p) for p in vidur_pairs], preds, left_out=f"TP {tp}"))
    return rows


def _gemm_flops(pair: Pair) -> np.ndarray:
    """FLOPs of each row's operator (0 for kernels without FLOPs)."""
    return np.nan_to_num(workload_of(pair.source_table).flops)


def leave_largest_out(sets: Sequence[MeasuredSet], *, quantile: float = 0.8, evals: int = 800,
                      registry: GPURegistry | None = None, config: FitConfig | None = None) -> list[dict[str, object]]:
    """Refit without every row whose operator's FLOPs exceed the ``quantile`` of its data
    set's (positive) FLOPs, in every pair of that data set, and score those rows alone."""
    from msgspec import to_builtins

    if not 0.0 < quantile < 1.0:
        from cascade.errors import ValidationError

        raise ValidationError(f"expected a quantile between 0 and 1, got {quantile}", field="largest")
    reg = registry or default_registry()
    all_pairs = pairs(list(sets))
    by_set: dict[str, list[np.ndarray]] = {}
    for p in all_pairs:
        f = _gemm_flops(p)
        by_set.setdefault(p.source.dataset, []).append(f[f > 0])
    limit = {d: float(np.quantile(np.concatenate(v), quantile)) for d, v in by_set.items() if sum(map(len, v))}

    def held(pair: Pair) -> np.ndarray:
        cut = limit.get(pair.source.dataset)
        return np.zeros(len(pair.keys), dtype=bool) if cut is None else _gemm_flops(pair) > cut

    cal = fit_sets(sets, evals=evals, registry=reg, exclude=held, rounds=2, config=config)
    select = {(p.source.dataset, p.source.spec.id, p.target.spec.id): held(p) for p in all_pairs}
    rows: list[dict[str, object]] = []
    for s in evaluate(all_pairs, cal, ("roofline", "scaled"), reg=reg, select=select):
        d = to_builtins(s)
        d["left_out"] = f"FLOPs > q{quantile:g}"
        rows.append(d)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cascade.fitting.extrapolate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/measured", help="measured data directory")
    ap.add_argument("--evals", type=int, default=800, help="objective evaluations per search")
    ap.add_argument("--largest", type=float, metavar="Q",
                    help="leave out the GEMMs above this FLOPs quantile of each data set instead")
    from cascade.fitting.options import add_model_options, fit_config

    add_model_options(ap)
    args = ap.parse_args(argv)
    config = fit_config(args)
    sets = discover(args.data, default_registry())
    if args.largest is not None:
        rows = leave_largest_out(sets, quantile=args.largest, evals=args.evals, config=config) if sets else []
        if not rows:
            sys.stderr.write(f"no GPU pairs with GEMMs under {args.data}\n")
            return 1
        sys.stdout.write(markdown_table(rows, families=("linear", "bmm")) + "\n")
        return 0
    rows = leave_one_tp_out(sets, evals=args.evals, config=config)
    if not rows:
        sys.stderr.write(f"no Vidur data with two or more tensor-parallel degrees under {args.data}\n")
        return 1
    sys.stdout.write(markdown_table([r for r in rows if r["family"] not in ("layer", SAME_WORK)],
                                    families=("all",)) + "\n")
    sys.stdout.write("\nper-layer sums (family `layer`: every per-layer operator of one Vidur layer at one "
                     "token count, TP degree left out):\n\n"
                     + markdown_table([r for r in rows if r["family"] in ("all", "layer")]) + "\n")
    sys.stdout.write("\nrepeatability (family `same work`: the left-out degree's operators whose work is the "
                     "same at every TP degree, here both norms, the residual add and the token embedding; `other runs` predicts each "
                     "from the measured ratio of the same work in the other degrees' runs, the floor "
                     "run-to-run variation sets; cascade.fitting.repeat):\n\n"
                     + markdown_table([r for r in rows if r["family"] == SAME_WORK]) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

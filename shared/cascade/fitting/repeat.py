"""How repeatable the measurements are: the same work measured again in another profiling run.

A Vidur profile measures every operator once per tensor-parallel degree, each degree in its
own run. Some operators do the same work at every degree (both norms, the residual add and
the token embedding act on the full hidden width): their rows are the same kernel on the same GPU, measured in
four runs. Predicting such a row of one degree's run from the *measured* target / source
ratio of the same work in the other runs (:func:`other_runs_predictions`; geometric mean
over them) needs no model at all, so its error is the part of a per-operator figure that
comes from run-to-run variation on the two GPUs, the floor no model of the work can go
below. ``python -m cascade.fitting.extrapolate`` prints it beside the model on the same
rows (:func:`repeat_rows`, model ``other runs``, family ``same work``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cascade.fitting.measured import Pair, vidur_tp_degree
from cascade.fitting.validation import ErrorStats, ape

#: The pseudo-model name of :func:`other_runs_predictions` in result rows.
OTHER_RUNS = "other runs"
#: The family label of the rows whose work repeats at another degree.
SAME_WORK = "same work"


def repeated_work(pair: Pair) -> np.ndarray:
    """Group id of each Vidur row whose work (operator, model shape, token count, FLOPs and
    bytes) was measured at more than one TP degree; -1 for a row whose work is its degree's
    alone (the TP-split projections, activation, rotary embedding)."""
    t = pair.source_table
    degree = vidur_tp_degree(pair.keys)
    parts = [str(k).split(",") for k in pair.keys]
    ident = np.asarray([",".join(p[:6] + p[7:]) + f"|{f:.6g}|{b:.6g}"
                        for p, f, b in zip(parts, np.asarray(t["flops"], float), np.asarray(t["bytes"], float),
                                           strict=True)], dtype=object)
    _, group = np.unique(ident, return_inverse=True)
    degrees: dict[int, set[int]] = {}
    for g, d in zip(group.tolist(), degree.tolist(), strict=True):
        degrees.setdefault(g, set()).add(d)
    repeated = np.fromiter((len(degrees[g]) > 1 for g in group.tolist()), dtype=bool, count=len(group))
    return np.where(repeated, group, -1).astype(np.int64)


def other_runs_predictions(pair: Pair, held: np.ndarray) -> np.ndarray:
    """Target time of each ``held`` row of repeated work: its measured source time x the
    geometric-mean measured target / source ratio of the same work's rows outside ``held``
    (the other runs); NaN where there are none."""
    group = repeated_work(pair)
    src = np.asarray(pair.source_table["duration_ns"], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_ratio = np.log(pair.target_ns / src)
    known = (group >= 0) & ~held & np.isfinite(log_ratio)
    n = int(group.max()) + 1 if len(group) and group.max() >= 0 else 0
    total = np.bincount(group[known], weights=log_ratio[known], minlength=n)
    count = np.bincount(group[known], minlength=n)
    out = np.full(len(group), np.nan)
    use = held & (group >= 0)
    use[use] = count[group[use]] > 0
    out[use] = src[use] * np.exp(total[group[use]] / count[group[use]])
    return out


def repeat_rows(pairs: Sequence[Pair], held: Sequence[np.ndarray], model_predictions: Sequence[dict[str, np.ndarray]],
                *, left_out: str) -> list[dict[str, object]]:
    """Rows (family :data:`SAME_WORK`) scoring, on each pair's held rows of repeated work,
    :func:`other_runs_predictions` and every model in ``model_predictions`` (model name ->
    predicted target times of the pair's rows), as :class:`ErrorStats` dicts."""
    from msgspec import to_builtins

    rows: list[dict[str, object]] = []
    for pair, mask, preds in zip(pairs, held, model_predictions, strict=True):
        oracle = other_runs_predictions(pair, mask)
        sel = mask & np.isfinite(oracle)
        if not sel.any():
            continue
        for model, pred in {**preds, OTHER_RUNS: oracle}.items():
            errs = ape(pred[sel], pair.target_ns[sel])
            d = to_builtins(ErrorStats(
                kind=pair.source.kind, dataset=pair.source.dataset, family=SAME_WORK,
                source=pair.source.spec.id, target=pair.target.spec.id, model=model, count=int(sel.sum()),
                mape=float(np.mean(errs)), median_ape=float(np.median(errs)), p90_ape=float(np.percentile(errs, 90))))
            d["left_out"] = left_out
            rows.append(d)
    return rows
